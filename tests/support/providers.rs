//! The OpenAI Responses, Chat Completions and Gemini providers pointed at a loopback
//! server, with fake keys of each provider's shape (the Anthropic ones are in `support`).

use agentloop::llm::gemini::Gemini;
use agentloop::llm::openai::OpenAi;
use agentloop::llm::openai_chat::OpenAiChat;

use super::{Server, http_options};

/// A fake key of each provider's shape, so that the secret scrubber recognises it.
pub const OPENAI_KEY: &str = "sk-proj-FAKEKEY0123456789abcdefghij";
pub const GEMINI_KEY: &str = "AIzaFAKEKEY0123456789abcdefghijklmnopq";

/// The Responses API at `server/v1`, with [`OPENAI_KEY`] and loopback HTTP options.
pub fn openai(server: &Server) -> OpenAi {
    OpenAi::new(OPENAI_KEY)
        .with_base_url(format!("{}/v1", server.url()))
        .with_http_options(http_options())
}

/// A Chat Completions server at `server/v1`, with [`OPENAI_KEY`] and loopback HTTP
/// options.
pub fn openai_chat(server: &Server) -> OpenAiChat {
    OpenAiChat::compatible(format!("{}/v1", server.url()))
        .with_api_key(OPENAI_KEY)
        .with_http_options(http_options())
}

/// The Gemini API at `server`, with [`GEMINI_KEY`] and loopback HTTP options.
pub fn gemini(server: &Server) -> Gemini {
    Gemini::new(GEMINI_KEY)
        .with_base_url(server.url())
        .with_http_options(http_options())
}
