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
//! An offline session: a scripted model asks for one shell command, then answers.
//! Swap the scripted model for `Client::from_env()` and a provider profile to talk to a
//! real provider.
//!
//! ```
//! use std::sync::Arc;
//! use agentloop::exec::LocalExecutionEnvironment;
//! use agentloop::llm::Client;
//! use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
//! use agentloop::profiles::ProviderProfile;
//! use agentloop::session::{EventKind, Session, SessionConfig, StopReason};
//! use serde_json::json;
//!
//! let model = ScriptedModel::new(vec![
//!     ScriptedTurn::tool_call("shell", json!({"command": "echo hello from the tool"})),
//!     ScriptedTurn::text("The command printed a greeting."),
//! ]);
//! let client = Client::new().with_provider(model);
//! let profile = ProviderProfile::new("scripted", "demo")
//!     .with_tool(agentloop::tools::shell::tool());
//! let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir()));
//! let session = Session::new(profile, env, client, SessionConfig::default())?;
//!
//! let events = session.events();
//! session.submit("say hello")?;
//! session.close(); // after the queued input
//! let mut answer = String::new();
//! for event in events {
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
//! A script that only wants the final answer calls [`Session::run`](session::Session::run)
//! instead of iterating events.

#![deny(missing_docs)]

pub mod cancel;
pub mod error;
pub mod exec;
pub mod llm;
pub mod profiles;
pub mod prompt;
pub mod session;
pub mod subagent;
pub mod tools;

pub use cancel::CancelToken;
pub use error::{Error, ErrorKind, Result};
pub use session::{EventKind, Session, SessionConfig, SessionEvent};
