//! Provider profiles: the model, its tools, its system prompt and its capabilities.
//!
//! A [`ProviderProfile`] is what a [`Session`](crate::session::Session) asks "which model,
//! with which tools, told what?" (spec §3.2). Three constructors build the
//! provider-aligned profiles of spec §3.4–3.6, each shaped after its provider's own coding
//! agent so the model meets the tools it was trained on:
//!
//! | constructor | provider id | editing tool | other tools | shell default |
//! |---|---|---|---|---|
//! | [`openai`](openai())`(model)` | `"openai"` (Responses) | `apply_patch` (v4a; a freeform grammar tool on Responses) | `read_file`, `write_file`, `shell`, `grep`, `glob`, `update_plan` | 10 s |
//! | [`anthropic`](anthropic())`(model)` | `"anthropic"` (Messages) | `edit_file` (`old_string`/`new_string`/`replace_all`) | `read_file`, `write_file`, `shell`, `grep` (with `output_mode`), `glob`, `todo_write` | 120 s |
//! | [`gemini`](gemini())`(model)` | `"gemini"` | `edit_file` (`old_string`/`new_string`/`allow_multiple`/`instruction`) | `read_file`, `read_many_files`, `write_file`, `shell`, `grep`, `glob`, `list_dir`, `write_todos` | 10 s |
//!
//! The last tool before the subagent tools is the plan tool, in the shape of the provider's
//! own agent (see `tools/plan.rs`). Every profile also has the subagent tools `spawn_agent`, `send_input`, `wait` and
//! `close_agent` (`tools/subagent.rs`); a session whose depth reaches
//! `SessionConfig::max_subagent_depth` removes them. The capability flags come from a
//! documented table by model family (see [`ProviderProfile::with_model`]); parallel tool
//! calls are on for all three.
//!
//! # The system prompt
//!
//! [`ProviderProfile::build_system_prompt`] assembles the five layers of spec §6.1 with
//! the prompt module (reachable through [`crate::unstable`]): the profile's base instructions (our own words, covering the topics
//! of the provider's native agent), the environment block and git snapshot, the tool list,
//! the project instruction files (`AGENTS.md` plus the profile family's own file:
//! `.codex/instructions.md`, `CLAUDE.md` or `GEMINI.md`), and last the host's instructions
//! ([`ProviderProfile::with_instructions`]). A session captures the environment and the
//! project files once, when it starts ([`ProviderProfile::capture_environment`]), so every
//! request of the session carries the same system prompt bytes.
//!
//! # Any profile over any wire format
//!
//! The profile's [`id`](ProviderProfile::id) only says which provider of the
//! [`Client`](crate::llm::Client) gets the requests; the [`family`](ProviderProfile::family)
//! decides the prompt and the project files. So the OpenAI profile can drive a local
//! OpenAI-compatible server speaking Chat Completions: register the server, route the
//! profile to it, and offer `apply_patch` as a JSON function (Chat Completions has no
//! freeform tools; its wire format would send the function anyway, this keeps the prompt's
//! tool list saying so too):
//!
//! ```
//! use agentloop::llm::{openai_chat::OpenAiChat, Client};
//! use agentloop::profiles;
//!
//! let client = Client::new().with_provider(OpenAiChat::compatible("http://127.0.0.1:8080/v1"));
//! let profile = profiles::openai("qwen2.5-coder-32b")
//!     .with_provider_id("openai-chat")
//!     .without_freeform_tools();
//! let patch = profile.tools().into_iter().find(|t| t.name == "apply_patch").unwrap();
//! assert!(patch.freeform.is_none());
//! assert_eq!(patch.parameters["required"][0], "patch");
//! # let _ = client;
//! ```
//!
//! # Custom tools
//!
//! Register on top of any profile; a tool with the name of a profile tool replaces it
//! (latest wins, spec §3.7):
//!
//! ```
//! use agentloop::profiles;
//! use agentloop::llm::ToolDefinition;
//! use agentloop::tools::{RegisteredTool, ToolOutput};
//! use agentloop::serde_json::json;
//!
//! let mut profile = profiles::anthropic("claude-sonnet-4-5");
//! profile.tool_registry.register(RegisteredTool::new(
//!     ToolDefinition {
//!         name: "run_tests".into(),
//!         description: "Run the project's test suite".into(),
//!         parameters: json!({"type": "object", "properties": {"filter": {"type": "string"}}}).into(),
//!         freeform: None,
//!     },
//!     |_input, _ctx| Ok(ToolOutput::text("all tests pass")),
//! ));
//! assert!(profile.tool_registry.names().contains(&"run_tests".to_string()));
//! ```
//!
//! This module builds values; it never talks to a provider or runs a tool.

mod anthropic;
mod for_client;
mod gemini;
mod models;
mod openai;

pub use for_client::{DEFAULT_MODELS, for_client};

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::exec::ExecutionEnvironment;
use crate::llm::ToolDefinition;
use crate::prompt::{self, EnvironmentContext, ProjectDocs};
use crate::tools::{RegisteredTool, ToolRegistry};

pub use anthropic::{CONTEXT_1M_BETA, INTERLEAVED_THINKING_BETA, anthropic};
pub use gemini::gemini;
pub(crate) use models::known_models;
use models::{ModelInfo, model_info};
pub use openai::openai;

/// The model a session talks to, its tools, base instructions and capability flags.
///
/// Fields are public so a host can adjust a profile after building it; build one with
/// [`openai`](openai()), [`anthropic`](anthropic()), [`gemini`](gemini()) or
/// [`ProviderProfile::new`], then the `with_*` methods (the struct is `#[non_exhaustive]`,
/// so fields can be added without breaking hosts).
///
/// ```
/// use agentloop::profiles::ProviderProfile;
///
/// let profile = ProviderProfile::new("scripted", "demo-model")
///     .with_base_instructions("You are a careful coding agent.")
///     .with_parallel_tool_calls(true);
/// assert_eq!(profile.model, "demo-model");
/// assert!(profile.tools().is_empty());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProviderProfile {
    /// The provider id requests are routed to (`"anthropic"`, `"openai"`, `"gemini"`,
    /// `"scripted"`): the id a provider is registered under in the [`Client`](crate::llm::Client).
    pub id: String,
    /// Which profile family the prompt and the project instruction files follow
    /// (`"openai"`, `"anthropic"`, `"gemini"`; any other value loads `AGENTS.md` only).
    /// Equal to `id` unless the profile was routed elsewhere with
    /// [`with_provider_id`](Self::with_provider_id).
    pub family: String,
    /// The provider's model id.
    pub model: String,
    /// Every tool the model may call, in the order the model sees them.
    pub tool_registry: ToolRegistry,
    /// The first layer of the system prompt: who the agent is and how it works.
    pub base_instructions: String,
    /// The host's instructions, appended last to the system prompt (highest precedence).
    pub user_instructions: Option<String>,
    /// Provider-specific request options, keyed by provider id (see
    /// [`Request::provider_options`](crate::llm::Request::provider_options)).
    pub provider_options: Option<Value>,
    /// The model can reason (thinking, reasoning effort).
    pub supports_reasoning: bool,
    /// The provider streams responses.
    pub supports_streaming: bool,
    /// Tool calls of one response may run at the same time.
    pub supports_parallel_tool_calls: bool,
    /// The model's context window in tokens (for the 80 % usage warning).
    pub context_window_size: usize,
    /// The command timeout for commands that set none, if this profile has its own
    /// (Claude Code uses 120 s); the session's configured default otherwise.
    pub default_command_timeout: Option<Duration>,
    /// What [`capture_environment`](Self::capture_environment) captured.
    captured: Option<Arc<Captured>>,
}

/// The environment block and project instructions of one session, captured at its start.
#[derive(Debug)]
struct Captured {
    environment: EnvironmentContext,
    project_docs: ProjectDocs,
}

impl Captured {
    fn capture(env: &dyn ExecutionEnvironment, model: &str, family: &str) -> Captured {
        Captured {
            environment: EnvironmentContext::capture(env, model),
            project_docs: prompt::discover_project_docs(env, family),
        }
    }
}

impl ProviderProfile {
    /// A profile for `model` served by the provider registered as `id`, with no tools, no
    /// base instructions, streaming on, parallel tool calls off and a 200 000-token window.
    pub fn new(id: impl Into<String>, model: impl Into<String>) -> ProviderProfile {
        let id = id.into();
        ProviderProfile {
            family: id.clone(),
            id,
            model: model.into(),
            tool_registry: ToolRegistry::new(),
            base_instructions: String::new(),
            user_instructions: None,
            provider_options: None,
            supports_reasoning: false,
            supports_streaming: true,
            supports_parallel_tool_calls: false,
            context_window_size: 200_000,
            default_command_timeout: None,
            captured: None,
        }
    }

    /// Sets the model. When the model belongs to a family of this table, the context window
    /// and the reasoning flag follow it; otherwise they stay as they were.
    ///
    /// | model id starts with | context window (tokens) | reasons |
    /// |---|---|---|
    /// | `claude-3-7` | 200 000 | yes |
    /// | `claude-3` (other 3.x) | 200 000 | no |
    /// | `claude-` (Claude 4 and later) | 200 000 | yes |
    /// | `gpt-5`, `gpt-5.1`, `gpt-5.2-codex`, … | 400 000 | yes |
    /// | `gpt-4.1` | 1 047 576 | no |
    /// | `gpt-4o`, `gpt-4` | 128 000 | no |
    /// | `gpt-3.5` | 16 385 | no |
    /// | `o1`, `o3`, `o4`, `codex-` | 200 000 | yes |
    /// | `gemini-1.5-pro` | 2 097 152 | no |
    /// | `gemini-1.5`, `gemini-2.0` | 1 048 576 | no |
    /// | `gemini-` (2.5, 3 and later) | 1 048 576 | yes |
    ///
    /// The longest matching prefix wins. A provider prefix such as `models/` or `openai/` is
    /// ignored. Claude's 1M-token window needs a beta header and is not assumed; a host that
    /// sends it sets the window itself with
    /// [`with_context_window_size`](Self::with_context_window_size).
    pub fn with_model(mut self, model: impl Into<String>) -> ProviderProfile {
        self.model = model.into();
        if let Some(info) = model_info(&self.model) {
            self.context_window_size = info.context_window;
            self.supports_reasoning = info.supports_reasoning;
        }
        self
    }

    /// Routes requests to the provider registered as `id` (for example `"openai-chat"`
    /// for a local OpenAI-compatible server), keeping the profile's family, prompt and
    /// tools. Provider options stay keyed by the provider they were written for.
    pub fn with_provider_id(mut self, id: impl Into<String>) -> ProviderProfile {
        self.id = id.into();
        self
    }

    /// Sets the base instructions.
    pub fn with_base_instructions(mut self, text: impl Into<String>) -> ProviderProfile {
        self.base_instructions = text.into();
        self
    }

    /// Sets the host's instructions: the last layer of the system prompt, which takes
    /// precedence over everything before it.
    pub fn with_instructions(mut self, text: impl Into<String>) -> ProviderProfile {
        self.user_instructions = Some(text.into());
        self
    }

    /// Registers `tool`, replacing a tool of the same name (a custom tool overrides a
    /// profile default).
    pub fn with_tool(mut self, tool: RegisteredTool) -> ProviderProfile {
        self.tool_registry.register(tool);
        self
    }

    /// Replaces the whole tool registry.
    pub fn with_tool_registry(mut self, registry: ToolRegistry) -> ProviderProfile {
        self.tool_registry = registry;
        self
    }

    /// Offers every freeform tool (OpenAI's `apply_patch`) as a plain JSON function with
    /// its `parameters`, for wire formats and servers without freeform tools. Each tool
    /// keeps its place in the list.
    pub fn without_freeform_tools(mut self) -> ProviderProfile {
        for name in self.tool_registry.names() {
            let Some(tool) = self.tool_registry.get(&name) else {
                continue;
            };
            if tool.definition.freeform.is_some() {
                let mut tool = tool.clone();
                tool.definition.freeform = None;
                self.tool_registry.register(tool);
            }
        }
        self
    }

    /// Allows or forbids running the tool calls of one response at the same time.
    pub fn with_parallel_tool_calls(mut self, parallel: bool) -> ProviderProfile {
        self.supports_parallel_tool_calls = parallel;
        self
    }

    /// Sets the context window size in tokens.
    pub fn with_context_window_size(mut self, tokens: usize) -> ProviderProfile {
        self.context_window_size = tokens;
        self
    }

    /// Sets the provider options sent with every request, replacing the profile's.
    pub fn with_provider_options(mut self, options: Value) -> ProviderProfile {
        self.provider_options = Some(options);
        self
    }

    /// Merges `options` into the profile's provider options, object by object (a value of
    /// `options` replaces a non-object value at the same place).
    ///
    /// ```
    /// use agentloop::serde_json::json;
    /// let profile = agentloop::profiles::gemini("gemini-2.5-pro")
    ///     .merge_provider_options(json!({"gemini": {"cachedContent": "cachedContents/abc"}}));
    /// let options = profile.provider_options().unwrap();
    /// assert_eq!(options["gemini"]["cachedContent"], "cachedContents/abc");
    /// assert!(options["gemini"]["safetySettings"].is_array()); // the profile's own stay
    /// ```
    pub fn merge_provider_options(mut self, options: Value) -> ProviderProfile {
        match &mut self.provider_options {
            Some(existing) => merge_values(existing, options),
            None => self.provider_options = Some(options),
        }
        self
    }

    /// Sets this profile's default command timeout.
    pub fn with_default_command_timeout(mut self, timeout: Duration) -> ProviderProfile {
        self.default_command_timeout = Some(timeout);
        self
    }

    /// The tool definitions the model sees, in registration order (stable from request to
    /// request, which prompt caching depends on).
    pub fn tools(&self) -> Vec<ToolDefinition> {
        self.tool_registry.definitions()
    }

    /// The provider options sent with every request.
    pub fn provider_options(&self) -> Option<Value> {
        self.provider_options.clone()
    }

    /// Captures the environment block (working directory, git, platform, date, model) and
    /// the project instruction files through `env`, for every later
    /// [`build_system_prompt`](Self::build_system_prompt). A session calls this once when
    /// it starts; calling it again captures afresh.
    pub fn capture_environment(&mut self, env: &dyn ExecutionEnvironment) {
        self.captured = Some(Arc::new(Captured::capture(env, &self.model, &self.family)));
    }

    /// The environment block captured by
    /// [`capture_environment`](Self::capture_environment), if it ran.
    pub fn environment_context(&self) -> Option<&EnvironmentContext> {
        self.captured.as_ref().map(|c| &c.environment)
    }

    /// The project instructions captured by
    /// [`capture_environment`](Self::capture_environment), if it ran.
    pub fn project_docs(&self) -> Option<&ProjectDocs> {
        self.captured.as_ref().map(|c| &c.project_docs)
    }

    /// The system prompt (spec §6.1): base instructions, environment block and git
    /// snapshot, tool list, project instructions, host instructions — see
    /// [`unstable::build_system_prompt`](crate::unstable::build_system_prompt).
    ///
    /// Uses what [`capture_environment`](Self::capture_environment) captured (a session
    /// captures at its start, so every round sends the same bytes); without a capture it
    /// captures through `env` for this call only.
    pub fn build_system_prompt(&self, env: &dyn ExecutionEnvironment) -> String {
        self.system_prompt_with(env, &self.tools())
    }

    /// [`build_system_prompt`](Self::build_system_prompt) with the tool definitions the
    /// caller already has (the loop copies them once per input, not twice).
    pub(crate) fn system_prompt_with(
        &self,
        env: &dyn ExecutionEnvironment,
        tools: &[ToolDefinition],
    ) -> String {
        let fresh;
        let captured = match &self.captured {
            Some(captured) => captured.as_ref(),
            None => {
                fresh = Captured::capture(env, &self.model, &self.family);
                &fresh
            }
        };
        prompt::build_system_prompt(
            &self.base_instructions,
            &captured.environment,
            tools,
            &captured.project_docs,
            self.user_instructions.as_deref(),
        )
    }
}

/// Merges `incoming` into `target`: objects key by key, anything else replaced.
fn merge_values(target: &mut Value, incoming: Value) {
    match (target, incoming) {
        (Value::Object(target), Value::Object(incoming)) => {
            for (key, value) in incoming {
                match target.get_mut(&key) {
                    Some(existing) => merge_values(existing, value),
                    None => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, incoming) => *target = incoming,
    }
}

/// A provider-aligned profile's common start: the family's base prompt, capabilities from
/// the model table (or the family's defaults), parallel tool calls on.
fn aligned(family: &str, model: String, defaults: ModelInfo) -> ProviderProfile {
    let info = model_info(&model).unwrap_or(defaults);
    let mut profile = ProviderProfile::new(family, model)
        .with_base_instructions(prompt::base_instructions(family).unwrap_or_default())
        .with_parallel_tool_calls(true)
        .with_context_window_size(info.context_window);
    profile.supports_reasoning = info.supports_reasoning;
    profile
}

/// `tools` with the background tools of `shape` right after the `shell` tool.
fn with_background(
    shape: crate::tools::background::Shape,
    tools: impl IntoIterator<Item = RegisteredTool>,
) -> Vec<RegisteredTool> {
    let mut list = Vec::new();
    for tool in tools {
        let shell = tool.definition.name == crate::tools::shell::NAME;
        list.push(tool);
        if shell {
            list.extend(crate::tools::background::tools(shape));
        }
    }
    list
}

/// Registers `tools` in order, then the subagent tools.
fn register_all(profile: &mut ProviderProfile, tools: impl IntoIterator<Item = RegisteredTool>) {
    for tool in tools {
        profile.tool_registry.register(tool);
    }
    for tool in crate::tools::subagent::tools() {
        profile.tool_registry.register(tool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merging_options_keeps_what_the_other_side_lacks() {
        let mut target = json!({"a": {"x": 1, "y": [1]}, "b": 2});
        merge_values(&mut target, json!({"a": {"y": [2], "z": 3}, "c": 4}));
        assert_eq!(
            target,
            json!({"a": {"x": 1, "y": [2], "z": 3}, "b": 2, "c": 4})
        );
    }

    #[test]
    fn with_model_follows_the_table_and_keeps_flags_for_unknown_models() {
        let profile = ProviderProfile::new("openai", "gpt-4o").with_model("gpt-5");
        assert_eq!(profile.context_window_size, 400_000);
        assert!(profile.supports_reasoning);
        let profile = profile.with_model("my-local-model");
        assert_eq!(profile.model, "my-local-model");
        assert_eq!(profile.context_window_size, 400_000);
    }
}
