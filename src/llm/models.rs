//! Asking an OpenAI-compatible server which models it serves (`GET {base}/models`), so that
//! a local server works without naming its model. It reads at most [`BODY_LIMIT`] bytes and
//! never sends a key anywhere but the server it belongs to.

use std::io::Read;

use serde_json::Value;

use super::http::HttpOptions;
use crate::error::{Error, ErrorKind, Result};

/// The most of a models list read: thousands of model ids fit.
const BODY_LIMIT: u64 = 1024 * 1024;

/// The model ids `GET {base_url}/models` lists (`{"data": [{"id": …}, …]}`, the shape
/// OpenAI, llama.cpp, vLLM, LM Studio and Ollama's `/v1` share).
pub(crate) fn list(
    provider: &str,
    base_url: &str,
    api_key: Option<&str>,
    http: &HttpOptions,
) -> Result<Vec<String>> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let shown = super::base_url::shown(&url);
    let failed = |kind, why: String| {
        Error::new(kind, format!("asking {shown} for its models: {why}")).with_provider(provider)
    };
    let mut request = http.agent().get(&url);
    if let Some(key) = api_key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let response = request
        .call()
        .map_err(|e| failed(ErrorKind::Network, e.to_string()))?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(BODY_LIMIT)
        .read_to_end(&mut body)
        .map_err(|e| failed(ErrorKind::Network, e.to_string()))?;
    if !(200..300).contains(&status) {
        return Err(failed(
            super::status::kind_for_status(status),
            format!("the server answered {status}"),
        )
        .with_status(status));
    }
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| failed(ErrorKind::InvalidRequest, format!("not JSON ({e})")))?;
    let ids = value["data"]
        .as_array()
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m["id"].as_str())
                .map(str::to_string)
                .collect()
        })
        .ok_or_else(|| {
            failed(
                ErrorKind::InvalidRequest,
                "the answer has no `data` list".into(),
            )
        })?;
    Ok(ids)
}
