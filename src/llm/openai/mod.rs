//! The OpenAI Responses wire format (`POST {base}/responses`): request bodies, the SSE
//! decoder and error classification. It never retries and never reads the environment.
//!
//! Requests are stateless (`store: false`): every round resends the whole conversation.
//! Reasoning comes back as encrypted content (`include: ["reasoning.encrypted_content"]`,
//! asked of every model except the GPT-4 and GPT-3.5 families, which do not reason) and is
//! kept on [`ThinkingData`](crate::llm::ThinkingData): `id` = the `rs_…` item id,
//! `signature` = the encrypted content, `text` = the summary parts joined with a blank
//! line. The next request hands the model its own reasoning back.
//!
//! Translation (unified spec §7.3):
//!
//! | unified | Responses |
//! |---|---|
//! | system and developer messages | `instructions`, joined with a blank line |
//! | user / assistant text, images | `message` items (`input_text` / `output_text`, `input_image` as a URL or data URI) |
//! | [`ToolCall`](crate::llm::ToolCall) (function / custom) | `function_call` / `custom_tool_call` items (`id` = [`ToolCall::item_id`](crate::llm::ToolCall::item_id)) |
//! | [`ToolResult`](crate::llm::ToolResult) | `function_call_output` / `custom_tool_call_output` items; with an image, the output is a list of `input_text` and `input_image` |
//! | thinking with an item id and encrypted content | a `reasoning` item; other thinking (another provider's) is not sent |
//! | [`ToolDefinition`](crate::llm::ToolDefinition) | a `function` tool (`strict: false`), or `custom` with a lark/regex grammar when `freeform` is set |
//! | `reasoning_effort` | `reasoning: {effort, summary: "auto"}` |
//! | `max_tokens` | `max_output_tokens` |
//! | `stop_sequences` | not supported by the Responses API; not sent |
//! | `cache_key` | `prompt_cache_key` (which requests share a prompt prefix) |
//! | `provider_options.openai` | merged into the body last (objects merge key by key) |
//!
//! Streaming: `response.created` starts the stream; output items become text, reasoning and
//! tool-call segments in output order; `response.completed` finishes it (tool calls present
//! → `tool_calls`), `response.incomplete` finishes with `length` (`max_output_tokens`) or
//! `content_filter`; `response.failed` and the in-stream `error` event are errors. Refusal
//! text is not answer text: it is reported as a warning (`refusal: …`). Event types the
//! decoder does not know are passed through as
//! [`StreamEvent::ProviderEvent`](crate::llm::StreamEvent::ProviderEvent).

mod error;
mod request;
mod stream;

use std::fmt;

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::llm::http::{self, EventIter};
use crate::llm::status;
use crate::llm::wire::{Decoder, HttpRequest, WireFormat};
use crate::llm::wire::{check_header_value, decode_body};
use crate::llm::{HttpOptions, Provider, Request, Response};

pub(crate) use error::openai_error;
pub(crate) use stream::ResponsesDecoder;

/// The provider id of [`OpenAi`].
pub const ID: &str = "openai";

/// The default base URL of the OpenAI API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The OpenAI Responses API as a provider (id `"openai"`).
///
/// ```no_run
/// use agentloop::llm::{openai::OpenAi, Client, Message, Request};
/// let client = Client::new().with_provider(OpenAi::new("sk-…"));
/// let response = client.complete(&Request::new("gpt-5.2", vec![Message::user("hello")]))?;
/// println!("{}", response.text());
/// # Ok::<(), agentloop::Error>(())
/// ```
#[derive(Clone)]
pub struct OpenAi {
    api_key: String,
    base_url: String,
    organization: Option<String>,
    project: Option<String>,
    http: HttpOptions,
    /// Idle keep-alive connections for the next requests (shared by clones).
    connections: http::Connections,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAi")
            .field("api_key", &"[REDACTED]")
            .field("base_url", &self.base_url)
            .field("organization", &self.organization)
            .field("project", &self.project)
            .field("http", &self.http)
            .finish()
    }
}

impl OpenAi {
    /// A provider with `api_key`, talking to [`DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> OpenAi {
        OpenAi {
            api_key: api_key.into(),
            base_url: DEFAULT_BASE_URL.to_string(),
            organization: None,
            project: None,
            http: HttpOptions::default(),
            connections: http::Connections::default(),
        }
    }

    /// Talks to `base_url` instead (the part before `/responses`, e.g. `http://127.0.0.1:8080/v1`).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> OpenAi {
        self.base_url = base_url.into().trim_end_matches('/').to_string();
        self
    }

    /// Replaces the timeouts and transport settings.
    pub fn with_http_options(mut self, http: HttpOptions) -> OpenAi {
        self.http = http;
        self.connections = http::Connections::default();
        self
    }

    /// Sends `OpenAI-Organization: organization` with every request.
    pub fn with_organization(mut self, organization: impl Into<String>) -> OpenAi {
        self.organization = Some(organization.into());
        self
    }

    /// Sends `OpenAI-Project: project` with every request.
    pub fn with_project(mut self, project: impl Into<String>) -> OpenAi {
        self.project = Some(project.into());
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Provider for OpenAi {
    fn id(&self) -> &str {
        ID
    }

    fn base_url(&self) -> Option<&str> {
        Some(self.base_url())
    }

    fn open(&self, request: &Request, cancel: &CancelToken) -> Result<EventIter> {
        http::open(self, &self.http, &self.connections, request, cancel)
    }
}

impl WireFormat for OpenAi {
    fn provider_id(&self) -> &str {
        ID
    }

    fn build_request(&self, request: &Request) -> Result<HttpRequest> {
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
        ];
        if !self.api_key.is_empty() {
            check_header_value(ID, "api key", &self.api_key)?;
            headers.push((
                "authorization".to_string(),
                format!("Bearer {}", self.api_key),
            ));
        }
        if let Some(org) = &self.organization {
            headers.push(("openai-organization".to_string(), org.clone()));
        }
        if let Some(project) = &self.project {
            headers.push(("openai-project".to_string(), project.clone()));
        }
        Ok(HttpRequest {
            url: format!("{}/responses", self.base_url),
            headers,
            body: request::request_body(request, ID)?,
        })
    }

    fn decoder(&self, _request: &Request) -> Box<dyn Decoder> {
        Box::new(ResponsesDecoder::new(ID).with_api_key(Some(self.api_key.clone())))
    }

    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error {
        // A server that echoes the key must not put it in an error, whatever its shape.
        let body = status::redact_key(body, &self.api_key);
        openai_error(ID, Some(status), headers, &body)
    }
}

/// Decodes a complete Responses SSE body into the [`Response`] a stream would have
/// produced, or the error it carried.
///
/// An offline utility for tests, recorded transcripts and benchmarks: no I/O happens.
pub(crate) fn decode_stream(body: &[u8]) -> Result<Response> {
    decode_body(&mut ResponsesDecoder::new(ID), body)
}

#[cfg(test)]
mod tests;
