//! The ledger of a session's spending (its subagents' included), and the check the loop
//! makes at its safe points against the budgets of `budget.rs` (which also covers the
//! round and turn limits).
//!
//! A session and its subagents share one account: a child's ledger charges every model
//! call and tool call to its parent's ledger as well, so a subagent spends its parent's
//! budget, and a child stops as soon as any ancestor's budget is exhausted. A limit is
//! checked before each model call, that is after the model call or tool round that
//! crossed it; a tool round never runs more calls than the tool-call budget has left (the
//! rest are answered without running). This module does arithmetic and emits events; it
//! never calls a model, runs a tool or starts a thread.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::budget::{Budget, BudgetKind, BudgetScope, KINDS};
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::{EventKind, StopReason};
use crate::error::{Error, ErrorKind, Result};
use crate::llm::Usage;
use crate::profiles::ProviderProfile;
use crate::sync::lock;

/// What has been spent.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    tokens: u64,
    dollars: f64,
    tool_calls: u64,
    /// A model call whose cost could not be priced.
    unpriced: bool,
}

impl Spent {
    fn since(&self, base: &Spent) -> Spent {
        Spent {
            tokens: self.tokens.saturating_sub(base.tokens),
            dollars: self.dollars - base.dollars,
            tool_calls: self.tool_calls.saturating_sub(base.tool_calls),
            unpriced: self.unpriced && !base.unpriced,
        }
    }

    fn amount(&self, kind: BudgetKind, elapsed: Duration) -> f64 {
        match kind {
            BudgetKind::Tokens => self.tokens as f64,
            BudgetKind::Cost => self.dollars,
            BudgetKind::WallTime => elapsed.as_secs_f64(),
            BudgetKind::ToolCalls => self.tool_calls as f64,
        }
    }
}

/// A budget at or past a point: which, whose, its limit and what was used (in the
/// budget's unit: tokens, US dollars, seconds, tool calls).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crossing {
    /// Which budget.
    pub which: BudgetKind,
    /// Whose.
    pub scope: BudgetScope,
    /// Its limit.
    pub limit: f64,
    /// What was used.
    pub used: f64,
}

#[derive(Debug, Default)]
struct LedgerState {
    spent: Spent,
    /// `spent` when the current input started.
    input_base: Spent,
    /// When the current input started; `None` between inputs.
    input_started: Option<Instant>,
}

/// The spending of one session (its subagents' included), and its limits.
#[derive(Debug)]
pub struct Ledger {
    parent: Option<Arc<Ledger>>,
    input: Budget,
    session: Budget,
    started: Instant,
    state: Mutex<LedgerState>,
}

impl Ledger {
    /// The ledger of a session with `config`'s budgets, charging `parent` too.
    pub fn new(config: &SessionConfig, parent: Option<Arc<Ledger>>) -> Arc<Ledger> {
        Arc::new(Ledger {
            parent,
            input: config.input_budget,
            session: config.session_budget,
            started: Instant::now(),
            state: Mutex::new(LedgerState::default()),
        })
    }

    /// This ledger and its ancestors, nearest first.
    fn chain(&self) -> impl Iterator<Item = &Ledger> {
        std::iter::successors(Some(self), |ledger| ledger.parent.as_deref())
    }

    fn charge(&self, add: impl Fn(&mut Spent)) {
        for ledger in self.chain() {
            add(&mut lock(&ledger.state).spent);
        }
    }

    /// The first exhausted budget of this ledger or an ancestor.
    fn exhausted(&self) -> Option<Crossing> {
        self.chain()
            .find_map(|ledger| ledger.crossings(1.0).into_iter().next())
    }

    /// Whether this ledger or an ancestor has a cost budget.
    pub(crate) fn has_cost_budget(&self) -> bool {
        self.chain()
            .any(|l| l.input.cost_usd.is_some() || l.session.cost_usd.is_some())
    }

    /// This ledger's budgets used to `fraction` of their limit or more (an unpriced call
    /// counts as the whole cost budget).
    fn crossings(&self, fraction: f64) -> Vec<Crossing> {
        let state = lock(&self.state);
        let now = Instant::now();
        let input = state.input_started.map(|started| {
            let spent = state.spent.since(&state.input_base);
            (BudgetScope::Input, &self.input, spent, now - started)
        });
        let session = (
            BudgetScope::Session,
            &self.session,
            state.spent,
            now - self.started,
        );
        drop(state);
        let mut found = Vec::new();
        // The input's limits first: they are the nearer ones.
        for (scope, budget, spent, elapsed) in input.into_iter().chain([session]) {
            for which in KINDS {
                let Some(limit) = budget.limit(which) else {
                    continue;
                };
                let used = spent.amount(which, elapsed);
                let unpriced = which == BudgetKind::Cost && spent.unpriced;
                if unpriced || used >= limit * fraction {
                    found.push(Crossing {
                        which,
                        scope,
                        limit,
                        used,
                    });
                }
            }
        }
        found
    }

    /// How many more tool calls the budgets of this ledger and its ancestors allow;
    /// `None` when none limits them.
    fn tool_calls_left(&self) -> Option<u64> {
        let mut left: Option<u64> = None;
        for ledger in self.chain() {
            let state = lock(&ledger.state);
            let input_used = state.spent.since(&state.input_base).tool_calls;
            let active_input = state.input_started.is_some();
            let limits = [
                ledger
                    .session
                    .tool_calls
                    .map(|l| (l, state.spent.tool_calls)),
                ledger
                    .input
                    .tool_calls
                    .filter(|_| active_input)
                    .map(|l| (l, input_used)),
            ];
            for (limit, used) in limits.into_iter().flatten() {
                let remaining = limit.saturating_sub(used);
                left = Some(left.map_or(remaining, |l| l.min(remaining)));
            }
        }
        left
    }
}

/// A session's budgets as its worker keeps them: the ledger, and which warnings fired.
/// (Reachable through `unstable` for the bench, which times the bookkeeping of a round.)
#[derive(Debug)]
pub struct Meter {
    ledger: Arc<Ledger>,
    warn_at: f64,
    note: bool,
    /// Warnings given: (scope, kind).
    warned: Vec<(BudgetScope, BudgetKind)>,
    /// The budget that stopped the current input, if one did.
    stopped_by: Option<(BudgetKind, BudgetScope)>,
    input_started: Instant,
}

impl Meter {
    /// The meter of a session keeping `ledger`, warning at `config`'s fraction.
    pub fn new(ledger: Arc<Ledger>, config: &SessionConfig) -> Meter {
        Meter {
            ledger,
            warn_at: config.budget_warning_fraction,
            note: config.budget_note_to_model,
            warned: Vec::new(),
            stopped_by: None,
            input_started: Instant::now(),
        }
    }

    /// An input starts: its budgets start from zero, its warnings re-arm.
    pub fn start_input(&mut self) {
        let mut state = lock(&self.ledger.state);
        state.input_base = state.spent;
        self.input_started = Instant::now();
        state.input_started = Some(self.input_started);
        drop(state);
        self.warned
            .retain(|(scope, _)| *scope == BudgetScope::Session);
        self.stopped_by = None;
    }

    /// The input ended: what it spent on tool calls and how long it took.
    pub fn end_input(&mut self) -> (u64, Duration) {
        let mut state = lock(&self.ledger.state);
        state.input_started = None;
        let calls = state.spent.since(&state.input_base).tool_calls;
        (calls, self.input_started.elapsed())
    }

    /// Tool calls run over the whole session (subagents' included) and its age.
    pub(crate) fn session_figures(&self) -> (u64, Duration) {
        let calls = lock(&self.ledger.state).spent.tool_calls;
        (calls, self.ledger.started.elapsed())
    }

    /// The budget that stopped the input, if one did.
    pub(crate) fn stopped_by(&self) -> Option<(BudgetKind, BudgetScope)> {
        self.stopped_by
    }

    /// The budgets before a model call: the ones that passed the warning fraction since
    /// the last check (each budget once; once per input for the input's), and the
    /// exhausted one, if any (this ledger's or an ancestor's).
    pub fn check(&mut self) -> (Vec<Crossing>, Option<Crossing>) {
        let mut warnings = self.ledger.crossings(self.warn_at);
        warnings.retain(|crossing| {
            let key = (crossing.scope, crossing.which);
            let new = !self.warned.contains(&key);
            if new {
                self.warned.push(key);
            }
            new
        });
        let exhausted = self.ledger.exhausted();
        if let Some(crossing) = &exhausted {
            self.stopped_by = Some((crossing.which, crossing.scope));
        }
        (warnings, exhausted)
    }

    /// Charges one model call answered by `provider` with `usage`, costing `cost` (`None`:
    /// unknown).
    pub fn charge_call(&self, usage: &Usage, provider: &str, cost: Option<f64>) {
        let tokens = billed_tokens(usage, provider);
        self.ledger.charge(|spent| {
            spent.tokens = spent.tokens.saturating_add(tokens);
            match cost {
                Some(dollars) => spent.dollars += dollars,
                None => spent.unpriced = true,
            }
        });
    }

    /// Charges `calls` tool calls run.
    pub fn charge_tool_calls(&self, calls: u64) {
        if calls > 0 {
            self.ledger
                .charge(|spent| spent.tool_calls = spent.tool_calls.saturating_add(calls));
        }
    }

    /// How many more tool calls may run; `None`: no limit.
    pub fn tool_calls_left(&self) -> Option<u64> {
        self.ledger.tool_calls_left()
    }
}

/// Prompt plus output tokens of one call. Anthropic reports cache reads and writes apart
/// from `input_tokens`; the other formats count them inside it.
fn billed_tokens(usage: &Usage, provider: &str) -> u64 {
    let mut tokens = usage.input_tokens.saturating_add(usage.output_tokens);
    if provider == "anthropic" {
        tokens = tokens
            .saturating_add(usage.cache_read_tokens.unwrap_or(0))
            .saturating_add(usage.cache_write_tokens.unwrap_or(0));
    }
    tokens
}

/// What the check before a model call found.
pub(crate) struct Checked {
    /// The input must stop.
    pub(crate) stop: Option<StopReason>,
    /// A note for the model (a budget passed its warning fraction).
    pub(crate) note: Option<String>,
}

/// The limits checked before each model call, in order: the input's tool rounds, the
/// session's model calls, then the budgets (nearest first). Emits `TURN_LIMIT`,
/// `BUDGET_WARNING` (once per budget and scope) and `BUDGET_EXHAUSTED`.
pub(crate) fn check_limits(
    config: &SessionConfig,
    meter: &mut Meter,
    events: &EventSink,
    rounds: usize,
    assistant_turns: usize,
) -> Checked {
    let stop = |stop| Checked {
        stop: Some(stop),
        note: None,
    };
    let max_rounds = config.max_tool_rounds_per_input;
    if max_rounds > 0 && rounds >= max_rounds {
        events.emit(EventKind::TurnLimit {
            round: Some(rounds),
            total_turns: None,
        });
        return stop(StopReason::RoundLimit);
    }
    let max_turns = config.max_turns;
    if max_turns > 0 && assistant_turns >= max_turns {
        events.emit(EventKind::TurnLimit {
            round: None,
            total_turns: Some(assistant_turns),
        });
        return stop(StopReason::TurnLimit);
    }
    let (warnings, exhausted) = meter.check();
    let note = warnings.first().filter(|_| meter.note).map(note_for);
    for crossing in warnings {
        events.emit(EventKind::BudgetWarning {
            which: crossing.which,
            scope: crossing.scope,
            limit: crossing.limit,
            used: crossing.used,
        });
    }
    if let Some(crossing) = exhausted {
        events.emit(EventKind::BudgetExhausted {
            which: crossing.which,
            scope: crossing.scope,
            limit: crossing.limit,
            used: crossing.used,
        });
        return stop(StopReason::BudgetExhausted);
    }
    Checked { stop: None, note }
}

/// The note the model gets when a budget passes its warning fraction.
fn note_for(crossing: &Crossing) -> String {
    let whose = match crossing.scope {
        BudgetScope::Input => "this task's",
        BudgetScope::Session => "the session's",
    };
    let left = (crossing.limit - crossing.used).max(0.0);
    let (what, used, limit, left) = match crossing.which {
        BudgetKind::Tokens => (
            "token budget",
            format!("{:.0} tokens", crossing.used),
            format!("{:.0}", crossing.limit),
            format!("about {left:.0} tokens"),
        ),
        BudgetKind::Cost => (
            "cost budget",
            format!("${:.2}", crossing.used),
            format!("${:.2}", crossing.limit),
            format!("about ${left:.2}"),
        ),
        BudgetKind::WallTime => (
            "time budget",
            format!("{:.0} s", crossing.used),
            format!("{:.0} s", crossing.limit),
            format!("about {left:.0} s"),
        ),
        BudgetKind::ToolCalls => (
            "tool-call budget",
            format!("{:.0} tool calls", crossing.used),
            format!("{:.0}", crossing.limit),
            format!("{left:.0} tool calls"),
        ),
    };
    format!(
        "Budget note: you have used {used} of {whose} {what} of {limit}; {left} remain. \
         Wrap up: finish the step you are on, then give your final answer."
    )
}

/// Checks the budget settings before a session starts: a cost budget needs a price for
/// every model the session may call, and the warning fraction must be in (0, 1].
pub(crate) fn check_config(config: &SessionConfig, profile: &ProviderProfile) -> Result<()> {
    let fraction = config.budget_warning_fraction;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("budget_warning_fraction must be above 0 and at most 1, not {fraction}"),
        ));
    }
    for budget in [&config.input_budget, &config.session_budget] {
        if budget.cost_usd.is_some_and(|c| c.is_nan() || c < 0.0) {
            return Err(Error::new(
                ErrorKind::Configuration,
                "a cost budget must be a number of dollars, zero or more",
            ));
        }
    }
    let costed = config.input_budget.cost_usd.is_some() || config.session_budget.cost_usd.is_some();
    if !costed {
        return Ok(());
    }
    let models = std::iter::once(profile).chain(&config.fallback_models);
    for model in models.map(|p| p.model.as_str()) {
        if config.prices.price(model).is_none() {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "a cost budget needs the price of every model the session may call, and \
                     `{model}` has none: add it with SessionConfig::with_price, or drop the \
                     cost budget"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(input: Budget, session: Budget) -> SessionConfig {
        SessionConfig::default()
            .with_input_budget(input)
            .with_session_budget(session)
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Usage::default()
        }
    }

    #[test]
    fn a_child_charges_its_parent_and_stops_on_the_parents_budget() {
        let parent = Ledger::new(
            &config(Budget::default(), Budget::default().with_tokens(100)),
            None,
        );
        let child = Meter::new(
            Ledger::new(&SessionConfig::default(), Some(parent.clone())),
            &SessionConfig::default(),
        );
        child.charge_call(&usage(60, 10), "openai", Some(0.0));
        assert!(parent.exhausted().is_none());
        child.charge_call(&usage(25, 5), "openai", Some(0.0));
        let crossing = child.ledger.exhausted().expect("the parent's budget");
        assert_eq!(crossing.which, BudgetKind::Tokens);
        assert_eq!(crossing.scope, BudgetScope::Session);
        assert_eq!(crossing.used, 100.0);
        assert_eq!(lock(&child.ledger.state).spent.tokens, 100);
    }

    #[test]
    fn anthropic_cache_tokens_count_as_prompt_tokens() {
        let usage = Usage {
            cache_read_tokens: Some(1000),
            cache_write_tokens: Some(200),
            ..usage(10, 5)
        };
        assert_eq!(billed_tokens(&usage, "anthropic"), 1215);
        assert_eq!(billed_tokens(&usage, "openai"), 15);
    }

    #[test]
    fn the_input_budget_counts_from_the_inputs_start_and_tool_calls_left_is_the_minimum() {
        let cfg = config(
            Budget::default().with_tool_calls(3),
            Budget::default().with_tool_calls(5),
        );
        let mut meter = Meter::new(Ledger::new(&cfg, None), &cfg);
        meter.start_input();
        meter.charge_tool_calls(2);
        assert_eq!(meter.tool_calls_left(), Some(1));
        assert_eq!(meter.end_input().0, 2);
        meter.start_input();
        assert_eq!(meter.tool_calls_left(), Some(3), "the session has 3 left");
        meter.charge_tool_calls(2);
        assert_eq!(meter.tool_calls_left(), Some(1));
    }

    #[test]
    fn an_unpriced_call_exhausts_a_cost_budget_only() {
        let cfg = config(Budget::default(), Budget::default().with_cost_usd(5.0));
        let meter = Meter::new(Ledger::new(&cfg, None), &cfg);
        meter.charge_call(&usage(1, 1), "openai", Some(0.5));
        assert!(meter.ledger.exhausted().is_none());
        meter.charge_call(&usage(1, 1), "openai", None);
        let crossing = meter.ledger.exhausted().unwrap();
        assert_eq!(crossing.which, BudgetKind::Cost);
        let plain = Meter::new(
            Ledger::new(&SessionConfig::default(), None),
            &SessionConfig::default(),
        );
        plain.charge_call(&usage(1, 1), "openai", None);
        assert!(plain.ledger.exhausted().is_none());
    }

    #[test]
    fn notes_name_the_budget_and_what_is_left() {
        let note = note_for(&Crossing {
            which: BudgetKind::Tokens,
            scope: BudgetScope::Input,
            limit: 10_000.0,
            used: 8_200.0,
        });
        assert!(note.contains("8200 tokens of this task's token budget of 10000"));
        assert!(note.contains("about 1800 tokens remain"), "{note}");
    }
}
