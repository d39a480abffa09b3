//! What a new worker starts from ([`Start`]): made by a host's session, a subagent, a
//! resumed or a forked session, and consumed by `launch.rs`. Data only; it starts nothing.

use std::sync::Arc;

use super::checkpoint::marks::Marks;
use super::delivery::Forward;
use super::history::History;
use super::ledger::Ledger;
use super::mcp;
use super::transcript::TranscriptWriter;

/// What a new worker starts from.
pub(crate) struct Start {
    /// Subagent depth (0 for a host's session).
    pub(crate) depth: usize,
    /// For a subagent: where its events go.
    pub(crate) forward: Option<Forward>,
    pub(crate) history: History,
    pub(crate) transcript: Option<Arc<TranscriptWriter>>,
    /// `WARNING` events (code `"transcript"`) to emit after `SESSION_START`.
    pub(crate) warnings: Vec<String>,
    /// For a subagent: the parent's ledger, charged with this session's spending too.
    pub(crate) budget_parent: Option<Arc<Ledger>>,
    /// The prompt-cache key, when not the session's id: a resumed session keeps the key of
    /// the session that started the transcript (its requests share that one's prefix).
    pub(crate) cache_key: Option<String>,
    /// For a subagent: the parent's MCP servers.
    pub(crate) mcp: Option<mcp::SharedMcp>,
    /// The first id of the session's background processes.
    pub(crate) first_background_id: u64,
    /// The marks of the history (a resumed or forked session's) and the store they name.
    pub(crate) marks: (Marks, Option<std::path::PathBuf>),
    /// A fork: its budget starts at zero.
    pub(crate) fork: bool,
}
