//! The integration tests: one binary, one module per feature.

mod exec_files;
mod prompt;
mod support;
