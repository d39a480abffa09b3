//! agentloop: a synchronous coding agent loop.
//!
//! A host creates a `Session`, submits a task in plain language, and
//! iterates a typed event stream while the agent streams model output, calls tools (read,
//! write, edit, apply_patch, shell, grep, glob) and loops until the model answers with text
//! only. No async runtime: one worker thread per session, blocking HTTP with a cancel
//! handle, and an `Iterator` of events.
//!
//! (The crate is being built; the quick start lands with the session.)

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
