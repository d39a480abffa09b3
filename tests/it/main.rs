//! The integration tests: one binary, one module per feature.

mod apply_patch;
mod exec_files;
mod support;
mod tools_tree;
