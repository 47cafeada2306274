//! One type for "the configured LLM": [`LlmProvider`] uses `impl Future` and is not
//! object-safe, so a service holds this enum instead of a `Box<dyn LlmProvider>`.

use npcmem_core::extraction::prompt::ChatMessage;

use crate::anthropic::AnthropicClient;
use crate::openai::OpenAiClient;
use crate::provider::{AttemptGate, Completion, CompletionOptions, LlmError, LlmProvider};

#[derive(Debug, Clone)]
pub enum LlmClient {
    OpenAi(OpenAiClient),
    Anthropic(AnthropicClient),
}

impl LlmClient {
    pub fn model(&self) -> &str {
        match self {
            LlmClient::OpenAi(client) => client.model(),
            LlmClient::Anthropic(client) => client.model(),
        }
    }
}

impl From<OpenAiClient> for LlmClient {
    fn from(client: OpenAiClient) -> Self {
        LlmClient::OpenAi(client)
    }
}

impl From<AnthropicClient> for LlmClient {
    fn from(client: AnthropicClient) -> Self {
        LlmClient::Anthropic(client)
    }
}

impl LlmProvider for LlmClient {
    fn name(&self) -> &str {
        match self {
            LlmClient::OpenAi(client) => client.name(),
            LlmClient::Anthropic(client) => client.name(),
        }
    }

    async fn complete_gated<G: AttemptGate>(
        &self,
        messages: &[ChatMessage],
        options: &CompletionOptions,
        gate: &G,
    ) -> Result<Completion, LlmError> {
        match self {
            LlmClient::OpenAi(client) => client.complete_gated(messages, options, gate).await,
            LlmClient::Anthropic(client) => client.complete_gated(messages, options, gate).await,
        }
    }
}
