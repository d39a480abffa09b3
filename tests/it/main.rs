//! The integration tests: one binary, one module per feature.

mod apply_patch;
mod edit_file;
mod exec_env;
mod exec_files;
mod exec_process;
mod prompt;
mod search;
mod support;
mod tools;
mod tools_search;
mod tools_shell;
mod tools_tree;
