//! The integration tests: one binary, one module per feature.

mod exec_env;
mod exec_files;
mod exec_process;
mod search;
mod support;
