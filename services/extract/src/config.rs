use std::time::Duration;

use npcmem_bus::ConsumerSettings;
use npcmem_llm::{AnthropicConfig, BreakerSettings, ClientConfig, LlmClient, OpenAiConfig, RetrySettings};
use npcmem_service::{CommonConfig, ServiceError};

use crate::budget::BudgetSettings;

/// Which extractor turns conversations into memories (DESIGN §6 `NPCMEM_LLM_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LlmProvider {
    /// The offline rule-based extractor (seed §Fallback Strategies): no network, no budget.
    Rules,
    /// Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server,
    /// Ollama, LM Studio); `NPCMEM_LLM_BASE_URL` includes the version (`…/v1`).
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

/// npcmem-extract: turns recorded conversations into NPC memories.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-extract", version, about, args_override_self = true)]
pub struct ExtractConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub budget: BudgetArgs,
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
    /// LLM calls one replica keeps in flight (K); more batches are pulled to keep them busy.
    #[arg(long, env = "NPCMEM_EXTRACT_IN_FLIGHT", default_value_t = 16)]
    pub extract_in_flight: usize,
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
            .field("extract_in_flight", &self.extract_in_flight)
            .finish()
    }
}

/// DESIGN §6 budgets; the defaults and why they differ from the seed's are explained there.
#[derive(Debug, Clone, clap::Args)]
pub struct BudgetArgs {
    /// false: no LLM calls for memories at all; every conversation goes to the rules extractor.
    #[arg(long, env = "NPCMEM_MEMORY_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub memory_enabled: bool,
    /// Tokens per UTC day for all LLM memory calls of every replica together.
    #[arg(long, env = "NPCMEM_MEMORY_DAILY_TOKEN_BUDGET", default_value_t = 500_000)]
    pub memory_daily_token_budget: i64,
    /// Tokens per UTC day for one NPC's conversations.
    #[arg(long, env = "NPCMEM_MEMORY_PER_NPC_DAILY_BUDGET", default_value_t = 20_000)]
    pub memory_per_npc_daily_budget: i64,
    /// LLM extractions per minute, all replicas together (sliding minute).
    #[arg(long, env = "NPCMEM_MEMORY_EXTRACTION_RPM", default_value_t = 30)]
    pub memory_extraction_rpm: i64,
    /// Tokens a replica leases from the global budget at a time (more under load).
    #[arg(long, env = "NPCMEM_BUDGET_LEASE_TOKENS", default_value_t = 10_000)]
    pub budget_lease_tokens: i64,
    /// A lease's unused tokens go back to the global budget this often.
    #[arg(long, env = "NPCMEM_BUDGET_LEASE_RETURN_MS", default_value_t = 5_000)]
    pub budget_lease_return_ms: u64,
}

impl ExtractConfig {
    pub fn validate(&self) -> Result<(), ServiceError> {
        let invalid = |message: String| Err(ServiceError::Config(message));
        let llm = &self.llm;
        if llm.llm_provider != LlmProvider::Rules && llm.llm_model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return invalid("NPCMEM_LLM_MODEL is required with NPCMEM_LLM_PROVIDER openai or anthropic".into());
        }
        if !(1..=1024).contains(&llm.extract_in_flight) {
            return invalid("NPCMEM_EXTRACT_IN_FLIGHT must be 1..=1024".into());
        }
        if !(1..=10).contains(&llm.llm_max_attempts) {
            return invalid("NPCMEM_LLM_MAX_ATTEMPTS must be 1..=10".into());
        }
        if llm.llm_timeout_ms == 0 {
            return invalid("NPCMEM_LLM_TIMEOUT_MS must be positive".into());
        }
        let budget = &self.budget;
        for (name, value) in [
            ("NPCMEM_MEMORY_DAILY_TOKEN_BUDGET", budget.memory_daily_token_budget),
            ("NPCMEM_MEMORY_PER_NPC_DAILY_BUDGET", budget.memory_per_npc_daily_budget),
            ("NPCMEM_MEMORY_EXTRACTION_RPM", budget.memory_extraction_rpm),
        ] {
            if value < 0 {
                return invalid(format!("{name} must not be negative"));
            }
        }
        if budget.budget_lease_tokens <= 0 {
            return invalid("NPCMEM_BUDGET_LEASE_TOKENS must be positive".into());
        }
        Ok(())
    }

    /// The configured client, or None for the rules extractor.
    pub fn llm_client(&self) -> Result<Option<LlmClient>, ServiceError> {
        let llm = &self.llm;
        let client_config = |default_base_url: &str| ClientConfig {
            base_url: llm.llm_base_url.clone().unwrap_or_else(|| default_base_url.to_owned()),
            api_key: llm.llm_api_key.clone(),
            model: llm.llm_model.clone().unwrap_or_default(),
            timeout: Duration::from_millis(llm.llm_timeout_ms),
            retry: RetrySettings { max_attempts: llm.llm_max_attempts, ..RetrySettings::default() },
        };
        let config_error = |error: npcmem_llm::LlmConfigError| ServiceError::Config(error.to_string());
        Ok(match llm.llm_provider {
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
            failure_threshold: self.llm.llm_breaker_failures,
            cool_down: Duration::from_millis(self.llm.llm_breaker_cool_down_ms),
        }
    }

    pub fn budget_settings(&self) -> BudgetSettings {
        let budget = &self.budget;
        BudgetSettings {
            enabled: budget.memory_enabled,
            daily_tokens: budget.memory_daily_token_budget,
            per_npc_daily_tokens: budget.memory_per_npc_daily_budget,
            extractions_per_minute: budget.memory_extraction_rpm,
            lease_tokens: budget.budget_lease_tokens,
            lease_return: Duration::from_millis(budget.budget_lease_return_ms),
        }
    }

    /// With an LLM, jobs are pulled in batches of about K/4 and enough of them are handled
    /// at once that K calls stay in flight even when JetStream delivers short batches
    /// and while finished batches commit. A batch is done when its slowest call is, so
    /// smaller batches also keep one slow reply from holding many finished jobs back.
    pub fn consumer_settings(&self) -> ConsumerSettings {
        let mut settings = self.common.consumer_settings();
        if self.llm.llm_provider != LlmProvider::Rules {
            let in_flight = self.llm.extract_in_flight;
            settings.batch_size = settings.batch_size.min((in_flight / 4).max(8));
            let batches_for_k = in_flight.div_ceil(settings.batch_size) + 2;
            settings.concurrency = settings.concurrency.max(batches_for_k);
        }
        settings
    }
}
