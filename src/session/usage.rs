//! Usage and cost totals of a session: per model call, per input, per session; arithmetic
//! only, never I/O.

use std::ops::AddAssign;

use crate::llm::Usage;

/// Token counts and their cost, summed. The cost is known only while every call added
/// had a known cost.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) usage: Usage,
    dollars: f64,
    unpriced: bool,
}

impl Totals {
    /// Adds one model call.
    pub(crate) fn add(&mut self, usage: Usage, cost: Option<f64>) {
        self.usage += usage;
        match cost {
            Some(dollars) => self.dollars += dollars,
            None => self.unpriced = true,
        }
    }

    /// The summed cost in US dollars; `None` if any call had no known cost.
    pub(crate) fn cost(&self) -> Option<f64> {
        (!self.unpriced).then_some(self.dollars)
    }
}

impl AddAssign for Totals {
    fn add_assign(&mut self, other: Totals) {
        self.usage += other.usage;
        self.dollars += other.dollars;
        self.unpriced |= other.unpriced;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unpriced_call_makes_the_total_unknown() {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            ..Usage::default()
        };
        let mut totals = Totals::default();
        totals.add(usage, Some(0.5));
        totals.add(usage, Some(0.25));
        assert_eq!(totals.cost(), Some(0.75));
        assert_eq!(totals.usage.total_tokens, 30);
        let mut more = Totals::default();
        more.add(usage, None);
        totals += more;
        assert_eq!(totals.cost(), None);
        assert_eq!(totals.usage.input_tokens, 30);
    }
}
