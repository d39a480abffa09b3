//! Engine functions for the bench, tests and the curious, **outside semver**: anything here
//! may change or go away in any release, minor or patch.
//!
//! Hosts need none of this: sessions, profiles and the tool constructors in
//! [`tools`](crate::tools) cover the supported API. These re-exports exist so that the
//! benchmarks and black-box tests can reach the parsers and planners behind the tools without making them public API (ureq's `unversioned` module plays
//! the same part). This module defines nothing of its own. (Each wire format's offline
//! decoder is public API: `llm::<format>::decode_stream`.)

pub use crate::prompt::environment::{format_date, knowledge_cutoff, model_display_name};
pub use crate::prompt::git::find_git_root;
pub use crate::prompt::project_docs::instruction_files;
pub use crate::session::compaction::account::{
    CompactionLimits, TokenAccount, estimate_message_tokens, estimate_request_tokens,
    estimate_turn_tokens,
};
pub use crate::session::compaction::plan::CompactionPlan;
pub use crate::tools::apply_patch::{
    Applied, Hunk, HunkLine, Operation, Patch, apply_hunks, parse_patch,
};
pub use crate::tools::edit_file::{Edit, plan_edit};
pub use crate::tools::schema::{parse_arguments, validate};
pub use crate::tools::shell::format_result;
pub use crate::tools::truncate::{
    Truncated, TruncationMode, default_char_limit, default_line_limit, truncate_lines,
    truncate_output, truncate_tool_output,
};
