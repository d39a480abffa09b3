//! The model clients: each wire format against its recorded streams and the loopback
//! server, the SSE parser, `Client` policy, keep-alive, golden request bodies, hostile
//! servers, the scripted model, and a real llama.cpp server.

pub mod anthropic;
pub mod client;
pub mod gemini;
pub mod hostile_servers;
pub mod keepalive;
pub mod llamacpp;
pub mod openai;
pub mod openai_chat;
pub mod requests;
pub mod scripted;
pub mod sse;
pub mod wire;
