use std::time::Duration;

use npcmem_bus::ConsumerSettings;
use npcmem_service::embed::EmbedArgs;
use npcmem_service::llm::{LlmArgs, LlmProvider};
use npcmem_service::{CommonConfig, ServiceError};

use crate::budget::BudgetSettings;

/// npcmem-extract: turns recorded conversations into NPC memories.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-extract", version, about, args_override_self = true)]
pub struct ExtractConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// LLM calls one replica keeps in flight (K); more batches are pulled to keep them busy.
    #[arg(long, env = "NPCMEM_EXTRACT_IN_FLIGHT", default_value_t = 16)]
    pub extract_in_flight: usize,
    #[command(flatten)]
    pub budget: BudgetArgs,
    #[command(flatten)]
    pub embed: EmbedArgs,
}

/// Budgets; the defaults are explained in docs/operations.md.
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
        self.llm.validate()?;
        self.embed.validate()?;
        if !(1..=1024).contains(&self.extract_in_flight) {
            return invalid("NPCMEM_EXTRACT_IN_FLIGHT must be 1..=1024".into());
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
            let in_flight = self.extract_in_flight;
            settings.batch_size = settings.batch_size.min((in_flight / 4).max(8));
            let batches_for_k = in_flight.div_ceil(settings.batch_size) + 2;
            settings.concurrency = settings.concurrency.max(batches_for_k);
        }
        settings
    }
}
