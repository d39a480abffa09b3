//! The integration tests: one binary, one module per feature.

mod anthropic;
mod apply_patch;
mod client;
mod edit_file;
mod exec_env;
mod exec_files;
mod exec_process;
mod prompt;
mod scripted;
mod search;
mod session;
mod session_abort;
mod session_errors;
mod session_events;
mod session_http;
mod session_shell;
mod session_sse;
mod session_steering;
mod session_support;
mod session_tools;
mod sse;
mod support;
mod tools;
mod tools_search;
mod tools_shell;
mod tools_tree;
