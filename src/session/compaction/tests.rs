//! Unit tests of the accounting and the plan.

use super::account::*;
use super::plan::CompactionPlan;
use super::{plan, prompt};
use crate::llm::Usage;
use crate::llm::{ToolCall, ToolResult};
use crate::session::history::AssistantTurn;
use crate::session::history::Turn;

fn call_turn(n: usize) -> Turn {
    let call = ToolCall::new(format!("c{n}"), "echo", serde_json::json!({"n": n}));
    Turn::Assistant(AssistantTurn {
        content: String::new(),
        tool_calls: vec![call],
        reasoning: None,
        usage: Usage::default(),
        response_id: None,
        finish_reason: Default::default(),
        parts: Vec::new(),
        timestamp: std::time::SystemTime::now(),
    })
}

fn result_turn(n: usize, bytes: usize) -> Turn {
    let call = ToolCall::new(format!("c{n}"), "echo", serde_json::json!({"n": n}));
    Turn::tool_results(vec![ToolResult::for_call(&call, "r".repeat(bytes), false)])
}

#[test]
fn the_count_is_the_last_report_plus_what_was_appended_since() {
    let mut account = TokenAccount::new(1_000);
    account.set_fixed(&"s".repeat(4_000), &[]);
    assert_eq!(
        account.tokens(),
        1_000 + 1_004,
        "the estimate before any report"
    );
    let usage = Usage {
        input_tokens: 3_000,
        cache_read_tokens: Some(500),
        ..Usage::default()
    };
    account.report(&usage, "anthropic", account.history_tokens());
    assert_eq!(
        account.tokens(),
        3_500,
        "Anthropic reports cache reads apart"
    );
    account.report(&usage, "openai", account.history_tokens());
    assert_eq!(
        account.tokens(),
        3_000,
        "OpenAI's input tokens include cached ones"
    );
    let turn = result_turn(1, 400);
    account.push(&turn);
    assert_eq!(account.tokens(), 3_000 + estimate_turn_tokens(&turn));
    // Usage summed over a turn's calls would double count: only the last report counts.
    account.report(&usage, "openai", account.history_tokens());
    assert_eq!(account.tokens(), 3_000);
    account.reset(10);
    assert_eq!(
        account.tokens(),
        1_004 + 10,
        "a rewritten history drops the report"
    );
}

#[test]
fn an_implausibly_small_report_is_not_believed() {
    let mut account = TokenAccount::new(10_000);
    let usage = Usage {
        input_tokens: 10,
        ..Usage::default()
    };
    account.report(&usage, "openai", 10_000);
    assert_eq!(account.tokens(), 10_000, "the estimate");
}

#[test]
fn the_cut_never_separates_a_call_from_its_results() {
    let mut turns = vec![Turn::user("task")];
    for n in 0..40 {
        turns.push(call_turn(n));
        turns.push(result_turn(n, 2_000));
    }
    for recent in [0, 100, 499, 500, 501, 1_000, 3_000] {
        let limits = CompactionLimits {
            recent,
            ..CompactionLimits::for_window(20_000)
        };
        let plan = CompactionPlan::new(&turns, &limits, 0).unwrap();
        assert!(
            !matches!(turns.get(plan.cut()), Some(Turn::ToolResults(_))),
            "{recent}"
        );
        let compacted = plan.compacted(&turns, "summary".into());
        assert_eq!(
            crate::session::History::from_turns(compacted).check_tool_results(),
            Ok(()),
            "{recent}"
        );
    }
}

#[test]
fn user_messages_are_kept_newest_first_within_their_budget() {
    let mut turns = Vec::new();
    for n in 0..10 {
        turns.push(Turn::user(format!("request {n} {}", "u".repeat(400))));
        turns.push(call_turn(n));
        turns.push(result_turn(n, 400));
    }
    let limits = CompactionLimits {
        users: 350,
        recent: 0,
        ..CompactionLimits::for_window(20_000)
    };
    let plan = CompactionPlan::new(&turns, &limits, 0).unwrap();
    let compacted = plan.compacted(&turns, "s".into());
    let kept: Vec<&str> = compacted
        .iter()
        .filter_map(|t| match t {
            Turn::User(u) => Some(&u.content[..9]),
            _ => None,
        })
        .collect();
    assert_eq!(kept, ["request 7", "request 8", "request 9"]);
    assert!(
        plan.input().contains("request 0"),
        "the oldest go to the summariser"
    );
    assert!(!plan.input().contains("request 9"));
}

#[test]
fn a_later_compaction_updates_the_previous_summary() {
    let mut turns = vec![Turn::user("task")];
    turns.push(Turn::Summary(crate::session::history::SummaryTurn {
        content: prompt::summary_content("## Goal\nthe first summary"),
        turns_summarised: 12,
        timestamp: std::time::SystemTime::now(),
    }));
    for n in 0..5 {
        turns.push(call_turn(n));
        turns.push(result_turn(n, 100));
    }
    let limits = CompactionLimits {
        recent: 0,
        ..CompactionLimits::for_window(20_000)
    };
    let plan = CompactionPlan::new(&turns, &limits, 0).unwrap();
    assert!(
        plan.input()
            .starts_with("# Previous summary (update it)\n\n## Goal\nthe first summary")
    );
    assert!(
        !plan.input().contains("[Context compaction]"),
        "not a summary of a summary"
    );
    let compacted = plan.compacted(&turns, "new".into());
    let Some(Turn::Summary(summary)) = compacted.get(1) else {
        panic!("{compacted:?}")
    };
    assert_eq!(summary.turns_summarised, 12 + 10);
}

#[test]
fn middle_out_keeps_the_head_and_the_tail_within_the_limit() {
    let text = format!("HEAD{}TAIL", "é".repeat(5_000));
    let cut = plan::middle_out(&text, 1_000);
    assert!(cut.len() <= 1_000 + 60, "{}", cut.len());
    assert!(cut.starts_with("HEAD") && cut.ends_with("TAIL"));
    assert!(cut.contains("bytes cut from the middle"));
    assert_eq!(plan::middle_out("short", 1_000), "short");
}
