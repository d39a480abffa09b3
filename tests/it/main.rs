//! The integration tests: one binary, one module per feature.

mod anthropic;
mod client;
mod gemini;
mod openai;
mod openai_chat;
mod requests;
mod sse;
mod support;
mod wire;
