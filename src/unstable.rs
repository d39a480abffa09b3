//! Engine functions for the bench, tests and the curious, **outside semver**: anything here
//! may change or go away in any release, minor or patch.
//!
//! Hosts need none of this: sessions, profiles and the tool constructors in
//! [`tools`](crate::tools) cover the supported API. These re-exports exist so that the
//! benchmarks and black-box tests can reach the parsers, decoders and planners behind it
//! without making them public API (ureq's `unversioned` module plays the same part). The
//! rule for the supported API: an item that no example, README block or doctest uses is
//! here or crate-private. Nothing is defined here but the four offline decoders, each one
//! line over its wire format's own.

use crate::error::Result;
use crate::llm::Response;

pub use crate::llm::sse::{
    Event as SseEvent, MAX_EVENT_BYTES as MAX_SSE_EVENT_BYTES, Parser as SseParser,
};
pub use crate::mcp::names::{
    MAX_TOOL_NAME as MAX_MCP_TOOL_NAME, sanitise_schema as sanitise_mcp_schema,
    tool_name as mcp_tool_name,
};
pub use crate::mcp::server::McpServers;
pub use crate::prompt::environment::{format_date, knowledge_cutoff, model_display_name};
pub use crate::prompt::git::find_git_root;
pub use crate::prompt::project_docs::instruction_files;
pub use crate::prompt::{
    EnvironmentContext, GIT_SNAPSHOT_TIMEOUT, GitSnapshot, GitStatusCounts, PROJECT_DOCS_BUDGET,
    PROJECT_DOCS_TRUNCATION_MARKER, ProjectDocs, base_instructions, build_system_prompt,
    discover_project_docs,
};
pub use crate::session::compaction::account::{
    CompactionLimits, TokenAccount, estimate_message_tokens, estimate_request_tokens,
    estimate_turn_tokens,
};
pub use crate::session::compaction::plan::CompactionPlan;
pub use crate::session::ledger::{
    Crossing as BudgetCrossing, Ledger as BudgetLedger, Meter as BudgetMeter,
};
pub use crate::tools::apply_patch::{
    Applied, Hunk, HunkLine, Operation, Patch, apply_hunks, parse_patch,
};
pub use crate::tools::background::run::format_result;
pub use crate::tools::edit_file::{Edit, plan_edit};
pub use crate::tools::prepared::{PreparedCall, ToolOutcome, prepare_call};
pub use crate::tools::schema::{parse_arguments, validate};
pub use crate::tools::subagent::tools as subagent_tools;
pub use crate::tools::truncate::{
    Truncated, TruncationMode, default_char_limit, default_line_limit, truncate_lines,
    truncate_output, truncate_tool_output,
};

/// Decodes a complete Anthropic Messages SSE body into the [`Response`] a stream would have
/// produced, or the error it carried. Offline: no I/O happens.
pub fn decode_anthropic_stream(body: &[u8]) -> Result<Response> {
    crate::llm::anthropic::decode_stream(body)
}

/// Decodes a complete OpenAI Responses SSE body (see [`decode_anthropic_stream`]).
pub fn decode_openai_stream(body: &[u8]) -> Result<Response> {
    crate::llm::openai::decode_stream(body)
}

/// Decodes a complete Chat Completions SSE body (see [`decode_anthropic_stream`]).
pub fn decode_openai_chat_stream(body: &[u8]) -> Result<Response> {
    crate::llm::openai_chat::decode_stream(body)
}

/// Decodes a complete Gemini SSE body (see [`decode_anthropic_stream`]).
pub fn decode_gemini_stream(body: &[u8]) -> Result<Response> {
    crate::llm::gemini::decode_stream(body)
}
