//! The Anthropic Messages API client: `POST {base_url}/v1/messages`. System messages
//! travel in the top-level `system` field (the API has no system role); the reply is the
//! concatenated text blocks.

use npcmem_core::extraction::prompt::{ChatMessage, ChatRole};
use serde::{Deserialize, Serialize};

use crate::provider::{AttemptGate, Completion, CompletionOptions, LlmConfigError, LlmError, LlmProvider, TokenUsage};
use crate::transport::{self, ClientConfig, Connection};

/// Used when `NPCMEM_LLM_BASE_URL` is not set.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this client's request and response shapes follow.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Separates several system messages in the one `system` field.
const SYSTEM_SEPARATOR: &str = "\n\n";

/// `base_url` without the version segment (`https://api.anthropic.com`; a trailing `/v1`
/// is accepted too); the key goes out as `x-api-key`.
pub type AnthropicConfig = ClientConfig;

#[derive(Clone, Debug)]
pub struct AnthropicClient {
    connection: Connection,
}

impl AnthropicClient {
    /// Checks the configuration; makes no request.
    pub fn new(config: AnthropicConfig) -> Result<Self, LlmConfigError> {
        let base_url = config.base_url.trim().trim_end_matches('/').to_owned();
        let base_url = base_url.strip_suffix("/v1").unwrap_or(&base_url).to_owned();
        Ok(Self { connection: Connection::new(config, &base_url, "v1/messages")? })
    }
    pub fn model(&self) -> &str {
        &self.connection.model
    }

    pub fn endpoint(&self) -> &str {
        self.connection.endpoint.as_str()
    }

    fn request(&self, body: &MessagesRequest<'_>) -> reqwest::RequestBuilder {
        let request = self
            .connection
            .http
            .post(self.connection.endpoint.clone())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(body);
        match &self.connection.api_key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }
}

impl LlmProvider for AnthropicClient {
    fn name(&self) -> &str {
        "anthropic"
    }

    /// `options.json_mode` is ignored: the Messages API has no JSON switch, and the
    /// extraction prompt asks for JSON itself.
    #[tracing::instrument(skip_all, fields(provider = "anthropic", model = %self.connection.model))]
    async fn complete_gated<G: AttemptGate>(
        &self,
        messages: &[ChatMessage],
        options: &CompletionOptions,
        gate: &G,
    ) -> Result<Completion, LlmError> {
        let body = MessagesRequest::new(&self.connection.model, messages, options);
        self.connection
            .complete(
                self.name(),
                gate,
                || self.request(&body),
                parse_reply,
                parse_usage,
                |reply| (reply.content, reply.stop_reason),
            )
            .await
    }
}

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    temperature: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<&'a ChatMessage>,
}

impl<'a> MessagesRequest<'a> {
    fn new(model: &'a str, messages: &'a [ChatMessage], options: &CompletionOptions) -> Self {
        let system_texts: Vec<&str> = messages
            .iter()
            .filter(|message| message.role == ChatRole::System)
            .map(|message| message.content.as_str())
            .collect();
        let system = (!system_texts.is_empty()).then(|| system_texts.join(SYSTEM_SEPARATOR));
        let conversation = messages.iter().filter(|message| message.role != ChatRole::System).collect();
        Self { model, max_tokens: options.max_tokens, temperature: options.temperature, system, messages: conversation }
    }
}

#[derive(Debug)]
struct Reply {
    content: String,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessagesResponse {
    content: Vec<ContentBlock>,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct UsageEnvelope {
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    /// Prompt-cache reads and writes are input tokens too, billed separately.
    cache_creation_input_tokens: Option<u32>,
    cache_read_input_tokens: Option<u32>,
}

fn parse_reply(body: &[u8]) -> Result<Reply, LlmError> {
    let response: MessagesResponse = serde_json::from_slice(body).map_err(|error| transport::invalid_json(&error))?;
    let content = response
        .content
        .into_iter()
        .filter(|block| block.kind == "text")
        .filter_map(|block| block.text)
        .collect::<String>();
    Ok(Reply { content, stop_reason: response.stop_reason })
}

/// Read separately from the reply, so odd usage fields never fail a good completion.
fn parse_usage(body: &[u8]) -> Option<TokenUsage> {
    let usage = serde_json::from_slice::<UsageEnvelope>(body).ok()?.usage?;
    let prompt_tokens = [usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens]
        .into_iter()
        .flatten()
        .fold(0u32, u32::saturating_add);
    Some(TokenUsage { prompt_tokens, completion_tokens: usage.output_tokens.unwrap_or(0) })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::retry::RetrySettings;

    use super::*;

    fn message(role: ChatRole, content: &str) -> ChatMessage {
        ChatMessage { role, content: content.to_owned() }
    }

    /// Through text, as on the wire: `to_value` would widen the f32 0.3 to 0.30000001….
    fn wire_json(request: &MessagesRequest<'_>) -> serde_json::Value {
        serde_json::from_str(&serde_json::to_string(request).expect("serialises")).expect("parses")
    }

    #[test]
    fn system_messages_move_to_the_system_field() {
        let messages = [
            message(ChatRole::System, "rules"),
            message(ChatRole::User, "hello"),
            message(ChatRole::System, "examples"),
            message(ChatRole::Assistant, "hi"),
        ];
        let options = CompletionOptions { temperature: 0.3, max_tokens: 500, json_mode: true };
        let body = wire_json(&MessagesRequest::new("claude", &messages, &options));
        assert_eq!(
            body,
            serde_json::json!({
                "model": "claude",
                "max_tokens": 500,
                "temperature": 0.3,
                "system": "rules\n\nexamples",
                "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            })
        );
        let without_system = [message(ChatRole::User, "hello")];
        let body = wire_json(&MessagesRequest::new("claude", &without_system, &options));
        assert!(body.get("system").is_none(), "{body}");
    }

    #[test]
    fn reply_concatenates_text_blocks_only() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","content":[
            {"type":"text","text":"[{\"content\":"},{"type":"thinking","thinking":"hmm"},{"type":"text","text":"\"x\"}]"}],
            "stop_reason":"end_turn","usage":{"input_tokens":30,"output_tokens":9,"cache_read_input_tokens":5}}"#;
        let reply = parse_reply(body).expect("valid reply");
        assert_eq!(reply.content, r#"[{"content":"x"}]"#);
        assert_eq!(reply.stop_reason.as_deref(), Some("end_turn"));
        assert_eq!(parse_usage(body), Some(TokenUsage { prompt_tokens: 35, completion_tokens: 9 }));
    }

    #[test]
    fn a_body_without_content_is_invalid() {
        for body in [r#"{"type":"error","error":{"type":"overloaded_error"}}"#, "[]", ""] {
            assert!(matches!(parse_reply(body.as_bytes()), Err(LlmError::InvalidResponse(_))), "{body}");
        }
    }

    #[test]
    fn a_base_url_with_v1_is_not_doubled() {
        let config = |base_url: &str| AnthropicConfig {
            base_url: base_url.to_owned(),
            api_key: Some("secret".into()),
            model: "claude-haiku".into(),
            timeout: Duration::from_secs(5),
            retry: RetrySettings::default(),
        };
        for base_url in ["https://api.anthropic.com", "https://api.anthropic.com/", "https://api.anthropic.com/v1/"] {
            let client = AnthropicClient::new(config(base_url)).expect("valid config");
            assert_eq!(client.endpoint(), "https://api.anthropic.com/v1/messages", "{base_url}");
        }
        assert!(!format!("{:?}", config("x")).contains("secret"));
    }
}
