//! Provider profiles: the model, its tools, its system prompt and its capabilities.
//!
//! A [`ProviderProfile`] is what a [`Session`](crate::session::Session) asks "which model,
//! with which tools, told what?" (spec §3.2). This module holds a plain, minimal profile;
//! the provider-aligned constructors (OpenAI, Anthropic, Gemini), prompt layering and
//! project-document discovery build on it. It never talks to a provider or runs a tool.

use std::time::Duration;

use serde_json::Value;

use crate::exec::ExecutionEnvironment;
use crate::llm::ToolDefinition;
use crate::tools::{RegisteredTool, ToolRegistry};

/// The model a session talks to, its tools, base instructions and capability flags.
///
/// Fields are public so a host can adjust a profile after building it; build one with
/// [`ProviderProfile::new`] and the `with_*` methods (the struct is `#[non_exhaustive]`, so
/// fields can be added without breaking hosts).
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
    /// The provider's model id.
    pub model: String,
    /// Every tool the model may call, in the order the model sees them.
    pub tool_registry: ToolRegistry,
    /// The first layer of the system prompt: who the agent is and how it works.
    pub base_instructions: String,
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
}

impl ProviderProfile {
    /// A profile for `model` served by the provider registered as `id`, with no tools, no
    /// base instructions, streaming on, parallel tool calls off and a 200 000-token window.
    pub fn new(id: impl Into<String>, model: impl Into<String>) -> ProviderProfile {
        ProviderProfile {
            id: id.into(),
            model: model.into(),
            tool_registry: ToolRegistry::new(),
            base_instructions: String::new(),
            provider_options: None,
            supports_reasoning: false,
            supports_streaming: true,
            supports_parallel_tool_calls: false,
            context_window_size: 200_000,
            default_command_timeout: None,
        }
    }

    /// Sets the base instructions.
    pub fn with_base_instructions(mut self, text: impl Into<String>) -> ProviderProfile {
        self.base_instructions = text.into();
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

    /// Sets the provider options sent with every request.
    pub fn with_provider_options(mut self, options: Value) -> ProviderProfile {
        self.provider_options = Some(options);
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

    /// The system prompt: the base instructions followed by an environment block.
    ///
    /// Deterministic: the same profile and environment give the same bytes, so that the
    /// prompt prefix stays cacheable from round to round. (The provider-aligned profiles
    /// replace this with the full layering of spec §6.)
    pub fn build_system_prompt(&self, env: &dyn ExecutionEnvironment) -> String {
        let mut prompt = String::with_capacity(self.base_instructions.len() + 256);
        if !self.base_instructions.is_empty() {
            prompt.push_str(self.base_instructions.trim_end());
            prompt.push_str("\n\n");
        }
        prompt.push_str("<environment>\n");
        prompt.push_str("Working directory: ");
        prompt.push_str(&env.working_directory().display().to_string());
        prompt.push_str("\nPlatform: ");
        prompt.push_str(&env.platform());
        prompt.push_str("\nOS version: ");
        prompt.push_str(&env.os_version());
        prompt.push_str("\nModel: ");
        prompt.push_str(&self.model);
        prompt.push_str("\n</environment>");
        prompt
    }
}
