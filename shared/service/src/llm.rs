//! The LLM settings every LLM-using service shares: provider, endpoint,
//! key, model, timeout, retries and the circuit breaker.

use std::time::Duration;

use npcmem_llm::{AnthropicConfig, BreakerSettings, ClientConfig, LlmClient, OpenAiConfig, RetrySettings};

use crate::ServiceError;

/// Which model does the LLM work; `rules` means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LlmProvider {
    /// The offline rule-based extractor: no network, no budget.
    Rules,
    /// Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server,
    /// Ollama, LM Studio); `NPCMEM_LLM_BASE_URL` includes the version (`…/v1`).
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

#[derive(Clone, clap::Args)]
pub struct LlmArgs {
    #[arg(long, env = "NPCMEM_LLM_PROVIDER", value_enum, default_value = "rules")]
    pub llm_provider: LlmProvider,
    /// Default: https://api.openai.com/v1 or https://api.anthropic.com.
    #[arg(long, env = "NPCMEM_LLM_BASE_URL")]
    pub llm_base_url: Option<String>,
    #[arg(long, env = "NPCMEM_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,
    /// Required with openai and anthropic.
    #[arg(long, env = "NPCMEM_LLM_MODEL")]
    pub llm_model: Option<String>,
    /// Bound on each HTTP attempt.
    #[arg(long, env = "NPCMEM_LLM_TIMEOUT_MS", default_value_t = 20_000)]
    pub llm_timeout_ms: u64,
    /// HTTP attempts per call, retries of 429/5xx/timeouts included; each is paid from the budget.
    #[arg(long, env = "NPCMEM_LLM_MAX_ATTEMPTS", default_value_t = 3)]
    pub llm_max_attempts: u32,
    /// Ask an OpenAI-compatible server for a JSON object (not for LM Studio).
    #[arg(long, env = "NPCMEM_LLM_JSON_MODE", default_value_t = false, action = clap::ArgAction::Set)]
    pub llm_json_mode: bool,
    /// Consecutive failed calls (invalid replies included) that open the circuit breaker.
    #[arg(long, env = "NPCMEM_LLM_BREAKER_FAILURES", default_value_t = 5)]
    pub llm_breaker_failures: u32,
    /// How long an open breaker sends everything to the rules extractor before one probe.
    #[arg(long, env = "NPCMEM_LLM_BREAKER_COOL_DOWN_MS", default_value_t = 30_000)]
    pub llm_breaker_cool_down_ms: u64,
}

/// Hand-written so the API key never reaches a log.
impl std::fmt::Debug for LlmArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmArgs")
            .field("llm_provider", &self.llm_provider)
            .field("llm_base_url", &self.llm_base_url)
            .field("llm_api_key", &self.llm_api_key.as_ref().map(|_| "<redacted>"))
            .field("llm_model", &self.llm_model)
            .field("llm_timeout_ms", &self.llm_timeout_ms)
            .field("llm_max_attempts", &self.llm_max_attempts)
            .field("llm_json_mode", &self.llm_json_mode)
            .field("llm_breaker_failures", &self.llm_breaker_failures)
            .field("llm_breaker_cool_down_ms", &self.llm_breaker_cool_down_ms)
            .finish()
    }
}

impl LlmArgs {
    pub fn validate(&self) -> Result<(), ServiceError> {
        let invalid = |message: &str| Err(ServiceError::Config(message.to_owned()));
        if self.llm_provider != LlmProvider::Rules && self.llm_model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return invalid("NPCMEM_LLM_MODEL is required with NPCMEM_LLM_PROVIDER openai or anthropic");
        }
        if !(1..=10).contains(&self.llm_max_attempts) {
            return invalid("NPCMEM_LLM_MAX_ATTEMPTS must be 1..=10");
        }
        if self.llm_timeout_ms == 0 {
            return invalid("NPCMEM_LLM_TIMEOUT_MS must be positive");
        }
        Ok(())
    }

    /// The configured client, or None for `rules`.
    pub fn client(&self) -> Result<Option<LlmClient>, ServiceError> {
        let client_config = |default_base_url: &str| ClientConfig {
            base_url: self.llm_base_url.clone().unwrap_or_else(|| default_base_url.to_owned()),
            api_key: self.llm_api_key.clone(),
            model: self.llm_model.clone().unwrap_or_default(),
            timeout: Duration::from_millis(self.llm_timeout_ms),
            retry: RetrySettings { max_attempts: self.llm_max_attempts, ..RetrySettings::default() },
        };
        let config_error = |error: npcmem_llm::LlmConfigError| ServiceError::Config(error.to_string());
        Ok(match self.llm_provider {
            LlmProvider::Rules => None,
            LlmProvider::Openai => {
                let config: OpenAiConfig = client_config(npcmem_llm::DEFAULT_OPENAI_BASE_URL);
                Some(npcmem_llm::OpenAiClient::new(config).map_err(config_error)?.into())
            }
            LlmProvider::Anthropic => {
                let config: AnthropicConfig = client_config(npcmem_llm::DEFAULT_ANTHROPIC_BASE_URL);
                Some(npcmem_llm::AnthropicClient::new(config).map_err(config_error)?.into())
            }
        })
    }

    pub fn breaker_settings(&self) -> BreakerSettings {
        BreakerSettings {
            failure_threshold: self.llm_breaker_failures,
            cool_down: Duration::from_millis(self.llm_breaker_cool_down_ms),
        }
    }
}
