//! What an ACP session's threads share: the prompt in progress, the permission policy of
//! its mode with the user's "always" answers, the before and after images of the files its
//! calls edit, and the one call that sends an update. Values and small decisions only: it
//! never blocks and never starts anything.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use serde_json::{Value, json};

use super::mapping;
use super::rpc::Connection;
use crate::session::{HookDecision, SessionMode};
use crate::sync::lock;

/// The prompt in progress, if any.
#[derive(Debug, Default)]
pub(crate) struct Prompt {
    /// The `session/prompt` request to answer when the input ends.
    pub(crate) id: Option<Value>,
    /// `session/cancel` came for it.
    pub(crate) cancelled: bool,
}

/// What the reader thread and the session's pump share.
pub(crate) struct Shared {
    pub(crate) id: String,
    pub(crate) connection: Arc<Connection>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) prompt: Mutex<Prompt>,
    /// Wakes the pump when it waits for a permission answer and the prompt is cancelled.
    pub(crate) waiter: Mutex<Option<Sender<()>>>,
    pub(crate) cwd: PathBuf,
    /// The model's context window, for `usage_update`.
    pub(crate) window: usize,
}

impl Shared {
    /// Sends one `session/update`.
    pub(crate) fn update(&self, update: Value) {
        self.connection.notify(
            "session/update",
            json!({"sessionId": self.id, "update": update}),
        );
    }
}

/// A file an editing call touches: its text before the call and after it (`None`: absent
/// or too large to show).
#[derive(Debug, Clone)]
pub(crate) struct Image {
    pub(crate) path: PathBuf,
    pub(crate) before: Option<String>,
    pub(crate) after: Option<String>,
}

/// Who is asked, and what was answered "always", for one session.
#[derive(Debug)]
pub(crate) struct Policy {
    pub(crate) mode: Mutex<SessionMode>,
    /// Tool name → allowed (`true`) or rejected for the rest of the session.
    always: Mutex<HashMap<String, bool>>,
    /// Call id → the files it edits.
    pub(crate) images: Mutex<HashMap<String, Vec<Image>>>,
}

impl Policy {
    pub(crate) fn new(mode: SessionMode) -> Policy {
        Policy {
            mode: Mutex::new(mode),
            always: Mutex::new(HashMap::new()),
            images: Mutex::new(HashMap::new()),
        }
    }

    /// What the user answered "always" for `tool`, if anything.
    pub(crate) fn remembered(&self, tool: &str) -> Option<bool> {
        lock(&self.always).get(tool).copied()
    }

    pub(crate) fn remember(&self, tool: &str, allowed: bool) {
        lock(&self.always).insert(tool.to_string(), allowed);
    }

    /// Whether a call of `tool` waits for the user: in the default mode, writes and
    /// commands do, unless an "always" answer covers them. The other modes never ask
    /// (read-only and plan are enforced, full access is the user's choice).
    pub(crate) fn asks(&self, tool: &str) -> bool {
        *lock(&self.mode) == SessionMode::Default
            && matches!(mapping::kind(tool), "edit" | "execute")
            && self.remembered(tool).is_none()
    }

    /// The `pre_tool_use` decision on a call of `tool`.
    pub(crate) fn decide(&self, tool: &str) -> HookDecision {
        if *lock(&self.mode) != SessionMode::Default {
            return HookDecision::Continue;
        }
        match (mapping::kind(tool), self.remembered(tool)) {
            ("edit" | "execute", Some(false)) => HookDecision::Deny(format!(
                "the user rejected every {tool} call for this session"
            )),
            ("edit" | "execute", None) => HookDecision::Ask,
            _ => HookDecision::Continue,
        }
    }

    /// The images of `call_id`, taken (each call's once).
    pub(crate) fn take_images(&self, call_id: &str) -> Vec<Image> {
        lock(&self.images).remove(call_id).unwrap_or_default()
    }

    /// The images of `call_id`, left in place (for a permission request).
    pub(crate) fn images(&self, call_id: &str) -> Vec<Image> {
        lock(&self.images).get(call_id).cloned().unwrap_or_default()
    }
}
