//! The integration tests: one binary, one module per feature.

mod anthropic;
mod client;
mod sse;
mod support;
