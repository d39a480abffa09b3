//! The integration tests: one binary, one module per feature.

mod exec_files;
mod support;
