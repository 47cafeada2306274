//! The HTTP plumbing both clients share: building the reqwest client, resolving the
//! endpoint, sending one request and sorting its status into success or an [`LlmError`].

use std::error::Error as _;
use std::time::Duration;

use chrono::Utc;
use reqwest::{RequestBuilder, Url};

use crate::provider::{LlmConfigError, LlmError, TokenUsage};
use crate::retry::{self, Attempt};

/// A completion of at most a few thousand tokens is a few KiB of JSON; a body beyond
/// this is not a completion, and reading it all would only cost memory.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// How much of a rejected request's body is kept in [`LlmError::Client`] for the log.
const MAX_ERROR_BODY_CHARS: usize = 512;

/// reqwest built with `rustls-no-provider` panics when it has no crypto provider; the
/// clients call this themselves, so forgetting it at start-up cannot crash a service.
pub fn install_crypto_provider() {
    // Err means a provider is already installed (ours or another): fine either way.
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, LlmConfigError> {
    install_crypto_provider();
    // The whole attempt is bounded by `tokio::time::timeout` in `retry::run`; the connect
    // timeout only makes an unreachable host fail with a clearer error.
    reqwest::Client::builder()
        .connect_timeout(timeout)
        .build()
        .map_err(|error| LlmConfigError::HttpClient(error_chain(&error)))
}

/// `base_url` joined with `path`, whether or not `base_url` ends in `/`.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<Url, LlmConfigError> {
    let invalid = |reason: String| LlmConfigError::InvalidBaseUrl { url: base_url.to_owned(), reason };
    let base = Url::parse(base_url.trim()).map_err(|error| invalid(error.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(invalid(format!("scheme {:?} is not http or https", base.scheme())));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("a base url takes no query or fragment".to_owned()));
    }
    let joined = format!("{}/{}", base.as_str().trim_end_matches('/'), path.trim_start_matches('/'));
    Url::parse(&joined).map_err(|error| invalid(error.to_string()))
}

/// Sends `request` once and sorts the reply: `parse_success` reads a 2xx body,
/// `parse_usage` reads token usage from any body that has it.
pub(crate) async fn attempt<T>(
    request: RequestBuilder,
    parse_success: fn(&[u8]) -> Result<T, LlmError>,
    parse_usage: fn(&[u8]) -> Option<TokenUsage>,
) -> Attempt<T> {
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => return Attempt::failed(transport_error(&error)),
    };
    let status = response.status();
    let retry_after = retry::retry_after(response.headers(), Utc::now());
    let body = match read_body(response).await {
        Ok(body) => body,
        Err(error) => return Attempt { outcome: Err(error), usage: None, retry_after },
    };
    let usage = parse_usage(&body);
    let outcome =
        if status.is_success() { parse_success(&body) } else { Err(status_error(status.as_u16(), retry_after, &body)) };
    Attempt { outcome, usage, retry_after }
}

fn status_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> LlmError {
    match status {
        429 => LlmError::RateLimited { retry_after },
        500..=599 => LlmError::Server { status },
        _ => {
            let text = String::from_utf8_lossy(body);
            LlmError::Client { status, body: text.trim().chars().take(MAX_ERROR_BODY_CHARS).collect() }
        }
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| transport_error(&error))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(LlmError::InvalidResponse(format!("response body exceeds {MAX_RESPONSE_BYTES} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn transport_error(error: &reqwest::Error) -> LlmError {
    if error.is_timeout() { LlmError::Timeout } else { LlmError::Transport(error_chain(error)) }
}

/// reqwest's own message is terse ("error sending request"); the cause is in the chain.
fn error_chain(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// A response body for [`LlmError::InvalidResponse`], shortened.
pub(crate) fn invalid_json(error: &serde_json::Error) -> LlmError {
    LlmError::InvalidResponse(format!("response is not the expected json: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_join_with_or_without_a_trailing_slash() {
        let expected = "http://127.0.0.1:8080/v1/chat/completions";
        assert_eq!(endpoint("http://127.0.0.1:8080/v1", "chat/completions").expect("valid").as_str(), expected);
        assert_eq!(endpoint("http://127.0.0.1:8080/v1/", "/chat/completions").expect("valid").as_str(), expected);
        assert_eq!(
            endpoint("https://api.anthropic.com", "v1/messages").expect("valid").as_str(),
            "https://api.anthropic.com/v1/messages"
        );
    }

    #[test]
    fn unusable_base_urls_are_refused() {
        for url in ["", "localhost:8080", "ftp://example.com", "http://example.com/v1?x=1"] {
            assert!(matches!(endpoint(url, "chat/completions"), Err(LlmConfigError::InvalidBaseUrl { .. })), "{url}");
        }
    }

    #[test]
    fn statuses_are_classified() {
        let wait = Some(Duration::from_secs(3));
        assert_eq!(status_error(429, wait, b""), LlmError::RateLimited { retry_after: wait });
        assert_eq!(status_error(503, wait, b"busy"), LlmError::Server { status: 503 });
        assert_eq!(status_error(529, None, b""), LlmError::Server { status: 529 });
        assert_eq!(
            status_error(400, None, b"  {\"error\":\"bad\"}\n"),
            LlmError::Client { status: 400, body: "{\"error\":\"bad\"}".into() }
        );
        let LlmError::Client { body, .. } = status_error(401, None, "é".repeat(2000).as_bytes()) else {
            panic!("401 is a client error");
        };
        assert_eq!(body.chars().count(), MAX_ERROR_BODY_CHARS);
    }
}

/// What either client needs to reach its endpoint.
#[derive(Clone)]
pub struct ClientConfig {
    /// The provider's base URL; see each client for whether it includes the version.
    pub base_url: String,
    /// Sent when set and not blank; local servers and gateways may need none.
    pub api_key: Option<String>,
    pub model: String,
    /// Bound on each HTTP attempt, reading the body included.
    pub timeout: std::time::Duration,
    pub retry: crate::retry::RetrySettings,
}

/// Hand-written so the API key never reaches a log.
impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

/// A client's validated settings: what both providers hold and use the same way.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoint: reqwest::Url,
    pub(crate) api_key: Option<String>,
    pub(crate) model: String,
    pub(crate) timeout: std::time::Duration,
    pub(crate) retry: crate::retry::RetrySettings,
}

impl Connection {
    /// One completion call: `request` builds each HTTP attempt, retried per
    /// [`crate::retry::run`] (asking `gate` before each retry); `content_of` takes the
    /// content and finish reason out of a provider's parsed reply.
    pub(crate) async fn complete<R, G: crate::provider::AttemptGate>(
        &self,
        provider: &str,
        gate: &G,
        request: impl Fn() -> RequestBuilder,
        parse_reply: fn(&[u8]) -> Result<R, LlmError>,
        parse_usage: fn(&[u8]) -> Option<TokenUsage>,
        content_of: fn(R) -> (String, Option<String>),
    ) -> Result<crate::provider::Completion, LlmError> {
        let retried =
            retry::run(&self.retry, self.timeout, provider, gate, || attempt(request(), parse_reply, parse_usage))
                .await;
        let (content, finish_reason) = content_of(retried.result?);
        Ok(crate::provider::Completion { content, usage: retried.usage, finish_reason, attempts: retried.attempts })
    }

    /// Checks the configuration (a model is required; a blank key counts as none) and
    /// builds the HTTP client for `base_url` + `path`; makes no request.
    pub(crate) fn new(
        config: ClientConfig,
        base_url: &str,
        path: &str,
    ) -> Result<Self, crate::provider::LlmConfigError> {
        let model = config.model.trim().to_owned();
        if model.is_empty() {
            return Err(crate::provider::LlmConfigError::MissingModel);
        }
        Ok(Self {
            http: http_client(config.timeout)?,
            endpoint: endpoint(base_url, path)?,
            api_key: config.api_key.filter(|key| !key.trim().is_empty()),
            model,
            timeout: config.timeout,
            retry: config.retry,
        })
    }
}

/// Shows where it talks to, never the key.
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("endpoint", &self.endpoint.as_str())
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}
