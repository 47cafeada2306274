//! What every chat-completion provider offers and how its calls fail.

use std::future::Future;
use std::ops::AddAssign;
use std::time::Duration;

use npcmem_core::extraction::prompt::ChatMessage;

/// Per-request settings. The extract service sends the original design's values
/// (`EXTRACTION_TEMPERATURE`, `EXTRACTION_MAX_OUTPUT_TOKENS`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompletionOptions {
    pub temperature: f32,
    pub max_tokens: u32,
    /// Ask an OpenAI-compatible server for a JSON object (`response_format`
    /// `{"type":"json_object"}`; the prompt must mention JSON). It forces a top-level
    /// object, not an array, and LM Studio rejects it with a 400 (it accepts only
    /// `json_schema`), so make it a per-deployment choice. Anthropic has no such switch
    /// and ignores it.
    pub json_mode: bool,
}

/// Tokens the server says a call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl TokenUsage {
    pub fn total_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

impl AddAssign for TokenUsage {
    fn add_assign(&mut self, other: Self) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
    }
}

/// The model's reply to one [`LlmProvider::complete`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub content: String,
    /// Summed over every HTTP attempt of this call whose response reported usage, so a
    /// budget charged with it also pays for attempts that failed after the server counted
    /// tokens.
    pub usage: TokenUsage,
    /// OpenAI `finish_reason` / Anthropic `stop_reason` (`"stop"`, `"length"`,
    /// `"end_turn"`, `"max_tokens"`, …) when the server sent one.
    pub finish_reason: Option<String>,
    /// HTTP attempts made, retries included (≥ 1).
    pub attempts: u32,
}

/// A chat-completion backend. Implementations retry transient failures themselves
/// ([`crate::retry`]); callers add a [`crate::CircuitBreaker`] around them.
pub trait LlmProvider: Send + Sync {
    /// Short, stable name for logs and metric labels (`"openai"`, `"anthropic"`).
    fn name(&self) -> &str;

    /// Like [`LlmProvider::complete`], but asks `gate` before every retry, so a caller
    /// whose budget pays per HTTP attempt can stop a call it cannot pay for.
    fn complete_gated<G: AttemptGate>(
        &self,
        messages: &[ChatMessage],
        options: &CompletionOptions,
        gate: &G,
    ) -> impl Future<Output = Result<Completion, LlmError>> + Send;

    /// One call with every retry the [`crate::RetrySettings`] allow.
    fn complete(
        &self,
        messages: &[ChatMessage],
        options: &CompletionOptions,
    ) -> impl Future<Output = Result<Completion, LlmError>> + Send {
        self.complete_gated(messages, options, &Ungated)
    }
}

/// Consulted before attempt 2, 3, … of a call (the caller paid for the first one before
/// calling). `false` ends the call with the last attempt's error, without waiting.
pub trait AttemptGate: Send + Sync {
    fn admit_retry(&self, attempt: u32) -> impl Future<Output = bool> + Send;
}

/// Admits every retry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ungated;

impl AttemptGate for Ungated {
    async fn admit_retry(&self, _attempt: u32) -> bool {
        true
    }
}

/// Every way an LLM call can fail. [`LlmError::is_retryable`] decides once whether
/// trying again could help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// No complete response within the client timeout.
    #[error("llm request timed out")]
    Timeout,
    /// HTTP 429. `retry_after` is the server's `Retry-After`, when it sent one.
    #[error("llm rate limited (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    /// HTTP 5xx (Anthropic's 529 "overloaded" included).
    #[error("llm server error (status {status})")]
    Server { status: u16 },
    /// Any other non-success status: bad request, bad key, unknown model. `body` is the
    /// start of what the server said, for the log.
    #[error("llm request rejected (status {status}): {body}")]
    Client { status: u16, body: String },
    /// A success status whose body is not the expected JSON.
    #[error("invalid llm response: {0}")]
    InvalidResponse(String),
    /// Connecting, sending or reading failed below HTTP.
    #[error("llm transport error: {0}")]
    Transport(String),
    /// The circuit breaker refused the call without contacting the provider.
    #[error("llm circuit breaker is open")]
    CircuitOpen,
}

impl LlmError {
    /// 429, 5xx, timeouts and transport errors may succeed on another attempt; other 4xx,
    /// invalid responses and an open breaker will not.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Timeout | LlmError::RateLimited { .. } | LlmError::Server { .. } | LlmError::Transport(_) => true,
            LlmError::Client { .. } | LlmError::InvalidResponse(_) | LlmError::CircuitOpen => false,
        }
    }

    /// A stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Timeout => "timeout",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Server { .. } => "server_error",
            LlmError::Client { .. } => "client_error",
            LlmError::InvalidResponse(_) => "invalid_response",
            LlmError::Transport(_) => "transport_error",
            LlmError::CircuitOpen => "circuit_open",
        }
    }
}

/// A client could not be built from its configuration. Permanent: fix the settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmConfigError {
    #[error("invalid llm base url {url:?}: {reason}")]
    InvalidBaseUrl { url: String, reason: String },
    #[error("llm model name is empty")]
    MissingModel,
    #[error("cannot build the http client: {0}")]
    HttpClient(String),
    /// The in-process model's files are missing or unusable (`minilm` feature).
    #[error("cannot load the local embedding model: {0}")]
    LocalModel(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retryable() {
        let retryable = [
            LlmError::Timeout,
            LlmError::RateLimited { retry_after: None },
            LlmError::RateLimited { retry_after: Some(Duration::from_secs(2)) },
            LlmError::Server { status: 500 },
            LlmError::Server { status: 529 },
            LlmError::Transport("connection refused".into()),
        ];
        let permanent = [
            LlmError::Client { status: 400, body: "bad".into() },
            LlmError::Client { status: 401, body: String::new() },
            LlmError::Client { status: 404, body: String::new() },
            LlmError::InvalidResponse("not json".into()),
            LlmError::CircuitOpen,
        ];
        for error in retryable {
            assert!(error.is_retryable(), "{error:?}");
        }
        for error in permanent {
            assert!(!error.is_retryable(), "{error:?}");
        }
    }

    #[test]
    fn usage_adds_up_without_overflowing() {
        let mut usage = TokenUsage { prompt_tokens: 10, completion_tokens: 5 };
        usage += TokenUsage { prompt_tokens: 7, completion_tokens: 0 };
        assert_eq!(usage, TokenUsage { prompt_tokens: 17, completion_tokens: 5 });
        assert_eq!(usage.total_tokens(), 22);
        usage += TokenUsage { prompt_tokens: u32::MAX, completion_tokens: 1 };
        assert_eq!(usage.prompt_tokens, u32::MAX);
    }
}
