//! Budgets as values: what one input and the whole session may spend — tokens (input plus
//! output), cost, wall time and tool calls — and the names of a budget in events and stop
//! reasons. The ledger that counts spending and the checks are in `ledger.rs`; this file
//! holds plain data and never counts anything.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits on what an input or a session may spend; `None` is no limit.
///
/// ```
/// use std::time::Duration;
/// use agentloop::session::{Budget, SessionConfig};
///
/// let config = SessionConfig::default()
///     .with_session_budget(Budget::default().with_cost_usd(2.0).with_wall_time(Duration::from_secs(1800)))
///     .with_input_budget(Budget::default().with_tokens(400_000).with_tool_calls(150));
/// assert_eq!(config.session_budget.cost_usd, Some(2.0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Budget {
    /// Tokens of every model call: prompt tokens (cache reads and writes included, for
    /// every provider) plus output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars, priced by [`SessionConfig::prices`](super::SessionConfig::prices). A session with a cost budget
    /// refuses to start when its model (or a fallback model) has no price; a call whose
    /// cost cannot be priced exhausts the cost budget, since it can no longer be kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Wall-clock time: from the input's start, or the session's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<Duration>,
    /// Tool calls the loop ran, or handed to the approval and hooks to run (the
    /// `final_answer` of structured output, and calls beyond this budget, which are
    /// answered without running, are not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
}

impl Budget {
    /// Sets the token limit.
    pub fn with_tokens(mut self, tokens: u64) -> Budget {
        self.tokens = Some(tokens);
        self
    }

    /// Sets the cost limit in US dollars.
    pub fn with_cost_usd(mut self, dollars: f64) -> Budget {
        self.cost_usd = Some(dollars);
        self
    }

    /// Sets the wall-time limit.
    pub fn with_wall_time(mut self, limit: Duration) -> Budget {
        self.wall_time = Some(limit);
        self
    }

    /// Sets the tool-call limit.
    pub fn with_tool_calls(mut self, calls: u64) -> Budget {
        self.tool_calls = Some(calls);
        self
    }

    pub(crate) fn limit(&self, kind: BudgetKind) -> Option<f64> {
        match kind {
            BudgetKind::Tokens => self.tokens.map(|n| n as f64),
            BudgetKind::Cost => self.cost_usd,
            BudgetKind::WallTime => self.wall_time.map(|d| d.as_secs_f64()),
            BudgetKind::ToolCalls => self.tool_calls.map(|n| n as f64),
        }
    }
}

/// Which budget: in events and in the outcome of an input stopped by
/// [`StopReason::BudgetExhausted`](super::StopReason::BudgetExhausted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetKind {
    /// Tokens (`limit` and `used` count tokens).
    Tokens,
    /// Cost (in US dollars).
    Cost,
    /// Wall time (in seconds).
    WallTime,
    /// Tool calls (a count).
    ToolCalls,
}

/// Every kind, in the order budgets are checked.
pub(crate) const KINDS: [BudgetKind; 4] = [
    BudgetKind::Tokens,
    BudgetKind::Cost,
    BudgetKind::WallTime,
    BudgetKind::ToolCalls,
];

/// Whose budget: the input's ([`SessionConfig::input_budget`](super::SessionConfig::input_budget))
/// or the session's ([`SessionConfig::session_budget`](super::SessionConfig::session_budget)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetScope {
    /// One input (with the subagents it started).
    Input,
    /// The whole session (with all its subagents).
    Session,
}
