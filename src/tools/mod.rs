//! Tools: the registry, argument validation, output truncation and the shared executors.
//!
//! A tool is a [`ToolDefinition`] (what the model sees) plus an executor (what runs). The
//! session's pipeline for one call is: look up and validate (`prepared.rs`) → the
//! `pre_tool_use` hooks (the approval policy is the last of them) → execute → the
//! `post_tool_use` hooks → truncate (spec §5, `truncate.rs`) → the model gets the truncated
//! text, the host's `TOOL_CALL_END` event gets the full text.
//!
//! Where a call executes is a performance path, not a difference in what it does
//! (`session/tool_round.rs`): on the round's own thread when the tool returns promptly on
//! cancel ([`RegisteredTool::returns_on_cancel`]); on that thread too, with the round's
//! cancel token as the thread's current one, when the tool does only bounded operations on
//! local files ([`RegisteredTool::bounded_file_io`]: no helper thread to start and join);
//! otherwise on a helper thread the round can give up on after a cancel.
//!
//! A tool failure is never a Rust error of the session: it is a result with
//! `is_error = true` whose text tells the model what went wrong and what to do instead.
//! Executors talk only to the [`ExecutionEnvironment`]; they never touch the filesystem or
//! spawn processes themselves.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::cancel::CancelToken;
use crate::exec::{ExecutionEnvironment, OutputCallback};
use crate::llm::{ImageData, ToolCall};

use crate::llm::{FreeformFormat, ToolDefinition};

pub(crate) mod apply_patch;
pub(crate) mod background;
pub(crate) mod edit_file;
pub(crate) mod glob;
pub(crate) mod grep;
pub(crate) mod list_dir;
pub(crate) mod plan;
pub(crate) mod prepared;
pub(crate) mod read_file;
pub(crate) mod read_many_files;
pub(crate) mod schema;
pub(crate) mod shell;
pub(crate) mod truncate;
pub(crate) mod write_file;

pub(crate) mod args;
pub(crate) mod subagent;
mod text;
mod tool_error;
pub use plan::{PlanEntry, PlanStatus};
pub use tool_error::ToolError;

/// `read_file`: a text file with line numbers (offset and limit), or an image.
pub fn read_file() -> RegisteredTool {
    read_file::tool()
}

/// `write_file`: creates or replaces a file (parent directories created).
pub fn write_file() -> RegisteredTool {
    write_file::tool()
}

/// `edit_file`: exact-string replacement (`old_string` → `new_string`, `replace_all`).
pub fn edit_file() -> RegisteredTool {
    edit_file::tool()
}

/// `apply_patch`: the v4a patch format, all files or none.
pub fn apply_patch() -> RegisteredTool {
    apply_patch::tool()
}

/// `shell`: a command through `bash -c`, with a timeout.
pub fn shell() -> RegisteredTool {
    shell::tool()
}

/// `grep`: regex search of file contents (ripgrep's rules for ignored files).
pub fn grep() -> RegisteredTool {
    grep::tool()
}

/// `glob`: file paths matching a pattern, newest first.
pub fn glob() -> RegisteredTool {
    glob::tool()
}

/// `list_dir`: a directory tree to a depth.
pub fn list_dir() -> RegisteredTool {
    list_dir::tool()
}

/// `read_many_files`: several files (paths or globs) in one call, within a budget.
pub fn read_many_files() -> RegisteredTool {
    read_many_files::tool()
}

/// What an executor receives.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolInput {
    /// Validated JSON arguments of a function call.
    Json(Map<String, Value>),
    /// The raw text of a freeform (custom) call.
    Freeform(String),
}

/// What an executor returns on success.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// The text for the model (before truncation) and for the host (in full).
    pub text: String,
    /// An image for models that accept images (for example `read_file` on a PNG).
    pub image: Option<ImageData>,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            image: None,
        }
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::text(text)
    }
}

/// Everything an executor may use besides its arguments.
#[non_exhaustive]
pub struct ToolContext<'a> {
    /// Where to run.
    pub env: &'a dyn ExecutionEnvironment,
    /// The id of the call being executed.
    pub call_id: &'a str,
    /// Cancelled when the session is interrupted or aborted.
    pub cancel: &'a CancelToken,
    /// Receives live command output (for `TOOL_CALL_OUTPUT_DELTA`).
    pub on_output: OutputCallback<'a>,
    /// Timeout for commands that do not set one (profile or session default).
    pub default_timeout: Duration,
    /// Upper bound for any command timeout.
    pub max_timeout: Duration,
    /// Whether file tools may touch paths outside the working directory (after `..` is
    /// resolved). Default `false`: such a path is an error telling the model to stay inside.
    pub allow_outside_working_dir: bool,
    /// The session's background processes (`None` outside a session: the background
    /// tools then say there are none).
    pub(crate) background: Option<&'a background::jobs::BackgroundJobs>,
}

impl<'a> ToolContext<'a> {
    /// A context with the spec's default timeouts (10 s, at most 600 s) and output ignored.
    pub fn new(
        env: &'a dyn ExecutionEnvironment,
        call_id: &'a str,
        cancel: &'a CancelToken,
    ) -> Self {
        ToolContext {
            env,
            call_id,
            cancel,
            on_output: &|_, _| {},
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(600),
            allow_outside_working_dir: false,
            background: None,
        }
    }
}

/// The function that runs a tool. An `Err` is a message for the model.
pub type ToolExecutor =
    Arc<dyn Fn(ToolInput, &ToolContext<'_>) -> Result<ToolOutput, String> + Send + Sync>;

/// A definition plus its executor.
#[derive(Clone)]
pub struct RegisteredTool {
    /// What the model sees.
    pub definition: ToolDefinition,
    /// What runs.
    pub executor: ToolExecutor,
    /// Whether the executor returns promptly once [`ToolContext::cancel`] is cancelled (the
    /// shell tool and MCP tools do). The loop runs such a tool on the round's own thread;
    /// any other tool runs on a helper thread that an interrupt or abort can leave behind
    /// if the tool is stuck (a read on a hung network file system, a host tool that never
    /// returns), so the session still ends. `false` from [`new`](Self::new) and
    /// [`fallible`](Self::fallible); set it with [`returning_on_cancel`](Self::returning_on_cancel).
    pub returns_on_cancel: bool,
    /// Whether the executor does nothing but the environment's file operations on a few
    /// files of bounded size (the built-in `read_file`, `write_file`, `edit_file` and
    /// `apply_patch` do). Where the environment's files are local
    /// ([`ExecutionEnvironment::files_are_local`]) and the session keeps file tools in the
    /// working directory, the loop runs such a tool on the round's own thread, as it runs
    /// one that returns on cancel: a helper thread's start and join cost a call about as
    /// much as reading a small file. `false` from [`new`](Self::new) and
    /// [`fallible`](Self::fallible); set it with
    /// [`doing_bounded_file_io`](Self::doing_bounded_file_io).
    pub bounded_file_io: bool,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("definition", &self.definition)
            .finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// A tool from a definition and a closure; an `Err` is a message for the model. To
    /// use `?` on ordinary errors inside the closure, use [`fallible`](Self::fallible).
    pub fn new(
        definition: ToolDefinition,
        executor: impl Fn(ToolInput, &ToolContext<'_>) -> Result<ToolOutput, String>
        + Send
        + Sync
        + 'static,
    ) -> RegisteredTool {
        RegisteredTool {
            definition,
            executor: Arc::new(executor),
            returns_on_cancel: false,
            bounded_file_io: false,
        }
    }

    /// Marks the tool as returning promptly on cancel, so that the loop runs it without a
    /// helper thread. Only for an executor that watches [`ToolContext::cancel`] (or passes
    /// it on, as [`exec_command`](crate::exec::ExecutionEnvironment::exec_command) does)
    /// while it waits: a marked tool that blocks keeps an interrupt or abort waiting too.
    pub fn returning_on_cancel(mut self) -> RegisteredTool {
        self.returns_on_cancel = true;
        self
    }

    /// Marks the tool as doing nothing but bounded file operations through the
    /// environment ([`bounded_file_io`](Self::bounded_file_io)). Only for an executor that
    /// calls no other code that can block: a marked tool on local files keeps an interrupt
    /// or abort waiting until it returns.
    pub fn doing_bounded_file_io(mut self) -> RegisteredTool {
        self.bounded_file_io = true;
        self
    }

    /// A tool whose closure fails with a [`ToolError`], into which `?` converts any error
    /// type (`std::io::Error`, `serde_json::Error`, `String`, `&str`, …); the error's text
    /// is the message the model reads. See [`ToolError`] for an example.
    pub fn fallible(
        definition: ToolDefinition,
        executor: impl Fn(ToolInput, &ToolContext<'_>) -> Result<ToolOutput, ToolError>
        + Send
        + Sync
        + 'static,
    ) -> RegisteredTool {
        RegisteredTool {
            definition,
            executor: Arc::new(move |input, ctx| {
                executor(input, ctx).map_err(ToolError::into_message)
            }),
            returns_on_cancel: false,
            bounded_file_io: false,
        }
    }
}

/// The tools of a profile, by name. Registration order is kept:
/// [`definitions`](Self::definitions) lists tools in the order they were first registered, so the tool list
/// a model sees is stable from request to request (prompt caching depends on it).
///
/// Cloning is cheap: the tools are shared between clones until one of them changes (the
/// schemas of a whole profile are many small JSON values, and a session, its subagents
/// and a host each hold a profile). Each tool is shared on its own too, so that a change
/// to one copies the map, not every other tool's schema (a session connects its subagent
/// tools to itself when it starts: a deep copy there cost the CLI 45 µs and 11 fresh
/// pages on its way to the first request).
#[derive(Clone, Default, Debug)]
pub struct ToolRegistry {
    tools: Arc<BTreeMap<String, (usize, Arc<RegisteredTool>)>>,
    next_order: usize,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds `tool`, replacing one with the same name (latest wins; the replaced tool's
    /// position in the list is kept).
    pub fn register(&mut self, tool: RegisteredTool) {
        let name = tool.definition.name.clone();
        let tools = Arc::make_mut(&mut self.tools);
        match tools.get_mut(&name) {
            Some(slot) => slot.1 = Arc::new(tool),
            None => {
                tools.insert(name, (self.next_order, Arc::new(tool)));
                self.next_order += 1;
            }
        }
    }

    /// Removes the tool called `name`; returns it if it was there.
    pub fn unregister(&mut self, name: &str) -> Option<RegisteredTool> {
        if !self.tools.contains_key(name) {
            return None;
        }
        Arc::make_mut(&mut self.tools)
            .remove(name)
            .map(|(_, tool)| Arc::unwrap_or_clone(tool))
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name).map(|(_, tool)| &**tool)
    }

    /// Every definition, in registration order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.ordered().map(|t| t.definition.clone()).collect()
    }

    /// Every tool name, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.ordered().map(|t| t.definition.name.clone()).collect()
    }

    fn ordered(&self) -> impl Iterator<Item = &RegisteredTool> {
        let mut tools: Vec<&(usize, Arc<RegisteredTool>)> = self.tools.values().collect();
        tools.sort_by_key(|(order, _)| *order);
        tools.into_iter().map(|(_, tool)| &**tool)
    }

    /// Looks up and validates `call` ([`prepared::prepare_call`]).
    pub(crate) fn prepare(&self, call: &ToolCall) -> Result<prepared::PreparedCall, String> {
        prepared::prepare_call(self, call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloned_registry_shares_its_tools_until_one_copy_changes() {
        let mut original = ToolRegistry::new();
        original.register(read_file());
        original.register(shell());
        let mut copy = original.clone();
        assert!(
            Arc::ptr_eq(&original.tools, &copy.tools),
            "the clone copied"
        );

        copy.register(list_dir());
        assert!(copy.unregister("shell").is_some());
        assert!(!Arc::ptr_eq(&original.tools, &copy.tools));
        assert_eq!(original.names(), ["read_file", "shell"]);
        assert_eq!(copy.names(), ["read_file", "list_dir"]);

        // Removing what is not there copies nothing.
        let mut again = original.clone();
        assert!(again.unregister("missing").is_none());
        assert!(Arc::ptr_eq(&original.tools, &again.tools));
    }

    #[test]
    fn a_change_to_one_copy_leaves_the_other_tools_shared_schemas_and_all() {
        let mut original = ToolRegistry::new();
        original.register(read_file());
        original.register(shell());
        let mut copy = original.clone();
        assert!(shell().returns_on_cancel);
        copy.register(RegisteredTool {
            returns_on_cancel: false,
            ..shell()
        });
        // The map is the copy's own; `read_file` (its schema too) is still the original's.
        assert!(!Arc::ptr_eq(&original.tools, &copy.tools));
        assert!(std::ptr::eq(
            original.get("read_file").unwrap(),
            copy.get("read_file").unwrap()
        ));
        assert!(original.get("shell").unwrap().returns_on_cancel);
        assert!(!copy.get("shell").unwrap().returns_on_cancel);
        // A tool taken out of a shared map comes out whole.
        let taken = copy.unregister("read_file").expect("registered");
        assert_eq!(
            taken.definition,
            original.get("read_file").unwrap().definition
        );
        assert_eq!(copy.names(), ["shell"]);
        assert_eq!(original.names(), ["read_file", "shell"]);
    }
}
