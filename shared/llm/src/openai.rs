//! The OpenAI-compatible chat-completions client: `POST {base_url}/chat/completions`.
//! Sends only fields every compatible server understands, so the same client talks to
//! OpenAI, vLLM, the llama.cpp server, Ollama (`…/v1`) and LM Studio.

use npcmem_core::extraction::prompt::ChatMessage;
use serde::{Deserialize, Serialize};

use crate::provider::{AttemptGate, Completion, CompletionOptions, LlmConfigError, LlmError, LlmProvider, TokenUsage};
use crate::transport::{self, ClientConfig, Connection};

/// Used when `NPCMEM_LLM_BASE_URL` is not set.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// `base_url` up to and including the version segment: `https://api.openai.com/v1`,
/// `http://127.0.0.1:8080/v1` (llama.cpp, vLLM), `http://127.0.0.1:11434/v1` (Ollama);
/// the key goes out as `Authorization: Bearer …` (local servers need none).
pub type OpenAiConfig = ClientConfig;

#[derive(Clone, Debug)]
pub struct OpenAiClient {
    connection: Connection,
}

impl OpenAiClient {
    /// Checks the configuration; makes no request.
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmConfigError> {
        let base_url = config.base_url.clone();
        Ok(Self { connection: Connection::new(config, &base_url, "chat/completions")? })
    }
    pub fn model(&self) -> &str {
        &self.connection.model
    }

    pub fn endpoint(&self) -> &str {
        self.connection.endpoint.as_str()
    }

    fn request(&self, body: &ChatRequest<'_>) -> reqwest::RequestBuilder {
        let request = self.connection.http.post(self.connection.endpoint.clone()).json(body);
        match &self.connection.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }
}

impl LlmProvider for OpenAiClient {
    fn name(&self) -> &str {
        "openai"
    }

    #[tracing::instrument(skip_all, fields(provider = "openai", model = %self.connection.model))]
    async fn complete_gated<G: AttemptGate>(
        &self,
        messages: &[ChatMessage],
        options: &CompletionOptions,
        gate: &G,
    ) -> Result<Completion, LlmError> {
        let body = ChatRequest {
            model: &self.connection.model,
            messages,
            temperature: options.temperature,
            max_tokens: options.max_tokens,
            response_format: options.json_mode.then_some(ResponseFormat { kind: "json_object" }),
        };
        self.connection
            .complete(
                self.name(),
                gate,
                || self.request(&body),
                parse_reply,
                parse_usage,
                |reply| (reply.content, reply.finish_reason),
            )
            .await
    }
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    /// `ChatMessage` serialises as `{"role": "system", "content": "…"}` already.
    messages: &'a [ChatMessage],
    temperature: f32,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat>,
}

#[derive(Serialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Debug)]
struct Reply {
    content: String,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<ChoiceMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
}

#[derive(Deserialize)]
struct UsageEnvelope {
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
}

fn parse_reply(body: &[u8]) -> Result<Reply, LlmError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|error| transport::invalid_json(&error))?;
    let Some(first_choice) = response.choices.into_iter().next() else {
        return Err(LlmError::InvalidResponse("response has no choices".to_owned()));
    };
    let Some(content) = first_choice.message.and_then(|message| message.content) else {
        return Err(LlmError::InvalidResponse("first choice has no message content".to_owned()));
    };
    Ok(Reply { content, finish_reason: first_choice.finish_reason })
}

/// Read separately from the reply, so odd usage fields never fail a good completion.
fn parse_usage(body: &[u8]) -> Option<TokenUsage> {
    let usage = serde_json::from_slice::<UsageEnvelope>(body).ok()?.usage?;
    Some(TokenUsage {
        prompt_tokens: usage.prompt_tokens.unwrap_or(0),
        completion_tokens: usage.completion_tokens.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::retry::RetrySettings;

    use super::*;

    #[test]
    fn reply_reads_the_first_choice() {
        let body = br#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"[]"},"finish_reason":"stop"},
            {"index":1,"message":{"role":"assistant","content":"other"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        let reply = parse_reply(body).expect("valid reply");
        assert_eq!(reply.content, "[]");
        assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
        assert_eq!(parse_usage(body), Some(TokenUsage { prompt_tokens: 12, completion_tokens: 3 }));
    }

    #[test]
    fn replies_without_content_are_invalid() {
        for body in [
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"finish_reason":"stop"}]}"#,
            r#"{"object":"error"}"#,
            "<html>bad gateway</html>",
        ] {
            assert!(matches!(parse_reply(body.as_bytes()), Err(LlmError::InvalidResponse(_))), "{body}");
        }
    }

    #[test]
    fn odd_usage_is_ignored_not_fatal() {
        let body = br#"{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":"many"}}"#;
        assert_eq!(parse_reply(body).expect("valid reply").content, "ok");
        assert_eq!(parse_usage(body), None);
        assert_eq!(
            parse_usage(br#"{"usage":{"prompt_tokens":4}}"#),
            Some(TokenUsage { prompt_tokens: 4, completion_tokens: 0 })
        );
        assert_eq!(parse_usage(b"not json"), None);
    }

    #[test]
    fn debug_output_hides_the_api_key() {
        let config = OpenAiConfig {
            base_url: DEFAULT_OPENAI_BASE_URL.into(),
            api_key: Some("sk-secret".into()),
            model: "gpt-4o-mini".into(),
            timeout: Duration::from_secs(5),
            retry: RetrySettings::default(),
        };
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-secret"), "{printed}");
        assert!(printed.contains("<redacted>"), "{printed}");
    }

    #[test]
    fn a_blank_model_is_refused() {
        let config = OpenAiConfig {
            base_url: DEFAULT_OPENAI_BASE_URL.into(),
            api_key: None,
            model: "  ".into(),
            timeout: Duration::from_secs(5),
            retry: RetrySettings::default(),
        };
        assert_eq!(OpenAiClient::new(config).err(), Some(LlmConfigError::MissingModel));
    }
}
