//! The integration tests: one binary, one module per feature.

mod scripted;
mod session;
mod session_abort;
mod session_events;
mod session_steering;
mod session_support;
mod session_tools;
mod support;
