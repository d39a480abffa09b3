//! agentloop: a synchronous coding agent loop.
//!
//! A host creates a `Session`, submits a task in plain language, and
//! iterates a typed event stream while the agent streams model output, calls tools (read,
//! write, edit, apply_patch, shell, grep, glob) and loops until the model answers with text
//! only. No async runtime: one worker thread per session, blocking HTTP with a cancel
//! handle, and an `Iterator` of events.
//!
//! # Quick start
//!
//! With a real provider: the key comes from the environment (`ANTHROPIC_API_KEY`,
//! `OPENAI_API_KEY` or `GEMINI_API_KEY`), [`profiles::for_client`] brings that provider's
//! own tools, system prompt and usual model, and [`Session::run`](session::Session::run)
//! returns the final answer — or `Err` when the provider failed.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentloop::exec::LocalExecutionEnvironment;
//! use agentloop::llm::Client;
//! use agentloop::profiles;
//! use agentloop::session::{Session, SessionConfig};
//!
//! let client = Client::from_env()?;
//! let profile = profiles::for_client(&client)?;
//! let env = Arc::new(LocalExecutionEnvironment::new(".")?);
//! let session = Session::new(profile, env, client, SessionConfig::default())?;
//! let outcome = session.run("make the failing test pass")?;
//! println!("{}", outcome.text);
//! # Ok::<(), agentloop::Error>(())
//! ```
//!
//! Offline, with the event stream: a scripted model asks for one shell command, then
//! answers. The command really runs; the events say what happened, in order.
//!
//! ```
//! use std::sync::Arc;
//! use agentloop::exec::LocalExecutionEnvironment;
//! use agentloop::llm::Client;
//! use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
//! use agentloop::profiles::ProviderProfile;
//! use agentloop::session::{EventKind, Session, SessionConfig, StopReason};
//! use agentloop::serde_json::json;
//!
//! let model = ScriptedModel::new(vec![
//!     ScriptedTurn::tool_call("shell", json!({"command": "echo hello from the tool"})),
//!     ScriptedTurn::text("The command printed a greeting."),
//! ]);
//! let client = Client::new().with_provider(model);
//! let profile = ProviderProfile::new("scripted", "demo")
//!     .with_tool(agentloop::tools::shell());
//! let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
//! let session = Session::new(profile, env, client, SessionConfig::default())?;
//!
//! let mut answer = String::new();
//! // The events of this input: the iterator ends with it.
//! for event in session.submit_events("say hello")? {
//!     match event.kind {
//!         EventKind::AssistantTextDelta { delta } => answer.push_str(&delta),
//!         EventKind::ToolCallEnd { output, .. } => {
//!             assert!(output.unwrap().contains("hello from the tool"))
//!         }
//!         EventKind::ProcessingEnd { stop_reason, .. } => {
//!             assert_eq!(stop_reason, StopReason::Completed)
//!         }
//!         _ => {}
//!     }
//! }
//! assert_eq!(answer, "The command printed a greeting.");
//! # Ok::<(), agentloop::Error>(())
//! ```
//!
//! The API takes `serde_json` values (tool arguments, schemas, event data); the crate
//! re-exports it as `agentloop::serde_json` (as the example above uses), so a host needs no
//! `serde_json` dependency of its own.
//!
//! # Where to go next
//!
//! - [`session`]: the loop, its control methods (steer, follow-up, interrupt, abort) and
//!   the documented order of events; every event serialises to one JSON object.
//! - [`profiles`]: the OpenAI, Anthropic and Gemini profiles, custom tools on top.
//! - [`llm`]: the provider-neutral client and the four wire formats (Anthropic Messages,
//!   OpenAI Responses, Chat Completions for OpenAI-compatible servers, Gemini), usable on
//!   their own.
//! - [`exec`]: where tools run; implement [`ExecutionEnvironment`](exec::ExecutionEnvironment)
//!   for containers or remote machines.
//! - [`tools`]: the shared tools and the registry for your own.
//! - [`mcp`]: the tools of MCP servers in a session (`SessionConfig::with_mcp_server`).
//! - The `examples/` directory: `minimal`, `custom_tool`, `steering`, `approvals`,
//!   `subagents`, `custom_environment`, `mcp_client`; and `examples/cli`, the reference CLI
//!   `agentloop` (a package of its own: `cargo install --path examples/cli`).

#![deny(missing_docs)]
// `unsafe` only where a raw syscall or a descriptor needs it: the modules of `exec/` that
// allow it below them say why, and every block carries a `// SAFETY:` note.
#![deny(unsafe_code)]

pub mod acp;
mod base64;
mod bytes;
mod cancel;
mod error;
pub mod exec;
mod json;
pub mod llm;
pub mod mcp;
pub mod profiles;
mod prompt;
pub mod session;
mod sha256;
mod sync;
mod time;
pub mod tools;
pub mod unstable;

/// The JSON crate the API takes (tool arguments, schemas, events), re-exported so that a
/// host needs no dependency of its own for it: `use agentloop::serde_json::json;`. Hidden
/// from the item list (it is serde_json's API, not ours; see the crate docs above).
#[doc(hidden)]
pub use serde_json;

pub use cancel::{CancelGuard, CancelToken};
pub use error::{Error, ErrorKind, Result};

/// The README's code blocks, run as doctests so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
