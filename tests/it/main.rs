//! The integration tests: one binary, one folder per part of `src/` (`llm/`, `exec/`,
//! `session/`, `tools/`, …), with the test support in the `support` crate
//! (`tests/support/`).

mod checkpoint;
mod compaction;
mod examples;
mod exec;
mod invariants;
mod llm;
mod mcp;
mod profiles;
mod prompt;
mod public_api;
mod remote;
mod session;
mod tools;
