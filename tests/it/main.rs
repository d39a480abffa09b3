//! The integration tests: one binary, one module per feature.

mod apply_patch;
mod edit_file;
mod exec_files;
mod support;
mod tools;
mod tools_tree;
