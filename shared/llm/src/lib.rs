//! Chat-completion clients for the LLM paths of npcmem (extraction, consolidation): an OpenAI-compatible client (OpenAI, vLLM, llama.cpp server, Ollama,
//! LM Studio) and an Anthropic client behind one [`LlmProvider`] trait, both retrying
//! 429/5xx/timeouts with backoff that honours `Retry-After`, and a [`CircuitBreaker`]
//! with Prometheus metrics to put in front of them.
//!
//! Knows HTTP and the chat-message types of `npcmem-core`; must not depend on NATS,
//! Postgres or any service. Budgets and the rules fallback are the caller's business.

pub mod anthropic;
pub mod breaker;
pub mod client;
pub mod embed;
#[cfg(feature = "minilm")]
pub mod minilm;
#[cfg(feature = "mock")]
pub mod mock;
pub mod openai;
pub mod provider;
pub mod retry;
mod transport;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicClient, AnthropicConfig, DEFAULT_ANTHROPIC_BASE_URL};
pub use breaker::{BreakerMetrics, BreakerSettings, BreakerState, CircuitBreaker};
pub use client::LlmClient;
pub use embed::{Embedder, HttpEmbedder};
pub use npcmem_core::extraction::prompt::{ChatMessage, ChatRole};
pub use openai::{DEFAULT_OPENAI_BASE_URL, OpenAiClient, OpenAiConfig};
pub use provider::{
    AttemptGate, Completion, CompletionOptions, LlmConfigError, LlmError, LlmProvider, TokenUsage, Ungated,
};
pub use retry::RetrySettings;
pub use transport::{ClientConfig, install_crypto_provider};
