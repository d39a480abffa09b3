//! Loop detection (spec §2.10): are the recent tool calls one short pattern repeating?
//!
//! A call's signature is its name plus a hash of its arguments in canonical JSON (object
//! keys sorted at every level), so `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same call.
//! The detector keeps the last `window` signatures and reports when they are a pattern of
//! length 1, 2 or 3 repeated to fill the window. It only reports; the session warns the
//! model and never halts. Pure code: no I/O, no threads.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use crate::llm::ToolCall;

/// The last tool-call signatures of a session.
#[derive(Debug, Clone)]
pub(crate) struct LoopDetector {
    window: usize,
    recent: VecDeque<u64>,
}

impl LoopDetector {
    pub(crate) fn new(window: usize) -> LoopDetector {
        LoopDetector {
            window,
            recent: VecDeque::with_capacity(window + 1),
        }
    }

    /// Records one call.
    pub(crate) fn record(&mut self, call: &ToolCall) {
        if self.window == 0 {
            return;
        }
        if self.recent.len() == self.window {
            self.recent.pop_front();
        }
        self.recent.push_back(signature(call));
    }

    /// Records a round's `calls`; the warning for the model when they closed a loop.
    pub(crate) fn after_round(&mut self, calls: &[ToolCall]) -> Option<String> {
        for call in calls {
            self.record(call);
        }
        self.check().then(|| {
            format!(
                "Loop detected: the last {} tool calls follow a repeating pattern. \
                 Try a different approach.",
                self.window
            )
        })
    }

    /// Whether the window is full of one repeating pattern. A detection clears the window,
    /// so the next warning needs another full window of repetition.
    pub(crate) fn check(&mut self) -> bool {
        let found = is_loop(self.recent.make_contiguous(), self.window);
        if found {
            self.recent.clear();
        }
        found
    }
}

/// The spec's `detect_loop` over the most recent signatures.
fn is_loop(recent: &[u64], window: usize) -> bool {
    if window == 0 || recent.len() < window {
        return false;
    }
    let recent = &recent[recent.len() - window..];
    for pattern_len in [1, 2, 3] {
        if window % pattern_len != 0 || window == pattern_len {
            continue;
        }
        let pattern = &recent[..pattern_len];
        if recent.chunks(pattern_len).all(|chunk| chunk == pattern) {
            return true;
        }
    }
    false
}

/// Name + canonical-JSON hash of the arguments.
fn signature(call: &ToolCall) -> u64 {
    let mut hasher = DefaultHasher::new();
    call.name.hash(&mut hasher);
    hash_canonical(&call.arguments, &mut hasher);
    hasher.finish()
}

fn hash_canonical(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => (2u8, n.to_string()).hash(hasher),
        Value::String(s) => (3u8, s).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            for item in items {
                hash_canonical(item, hasher);
            }
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(hasher);
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                key.hash(hasher);
                hash_canonical(&map[key], hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall::new("id", name, args)
    }

    fn feed(detector: &mut LoopDetector, calls: &[ToolCall]) -> bool {
        let mut found = false;
        for c in calls {
            detector.record(c);
            found |= detector.check();
        }
        found
    }

    #[test]
    fn key_order_does_not_change_the_signature() {
        let a = call("t", json!({"a": 1, "b": {"x": [1, 2], "y": null}}));
        let b = call("t", json!({"b": {"y": null, "x": [1, 2]}, "a": 1}));
        assert_eq!(signature(&a), signature(&b));
        assert_ne!(signature(&a), signature(&call("t", json!({"a": 2}))));
        assert_ne!(signature(&a), signature(&call("u", a.arguments.clone())));
    }

    #[test]
    fn repeating_patterns_of_one_two_and_three_fill_the_window() {
        let (a, b, c, d) = (
            call("a", json!({})),
            call("b", json!({})),
            call("c", json!({})),
            call("d", json!({})),
        );
        // Same call 10 times.
        let same = vec![a.clone(); 10];
        assert!(feed(&mut LoopDetector::new(10), &same));
        // Nine repeats are not enough.
        assert!(!feed(&mut LoopDetector::new(10), &same[..9]));
        // a b a b … (pattern of 2).
        let ab: Vec<ToolCall> = (0..10).map(|i| [&a, &b][i % 2].clone()).collect();
        assert!(feed(&mut LoopDetector::new(10), &ab));
        // a b c a b c … in a window of 9 (pattern of 3).
        let abc: Vec<ToolCall> = (0..9).map(|i| [&a, &b, &c][i % 3].clone()).collect();
        assert!(feed(&mut LoopDetector::new(9), &abc));
        // Varied calls never trigger.
        let varied: Vec<ToolCall> = (0..30)
            .map(|i| call("read", json!({ "n": i })))
            .chain([d])
            .collect();
        assert!(!feed(&mut LoopDetector::new(10), &varied));
    }

    #[test]
    fn a_detection_needs_a_fresh_window_before_the_next() {
        let a = call("a", json!({}));
        let mut detector = LoopDetector::new(4);
        let hits: Vec<bool> = (0..12)
            .map(|_| {
                detector.record(&a);
                detector.check()
            })
            .collect();
        assert_eq!(hits.iter().filter(|h| **h).count(), 3, "{hits:?}");
        assert!(hits[3] && hits[7] && hits[11]);
    }
}
