use std::time::Duration;

use npcmem_core::context::BudgetManager;
use npcmem_service::embed::EmbedArgs;
use npcmem_service::{CommonConfig, ServiceError};

/// npcmem-enrich: prompt context for an NPC's next line, and the query API.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-enrich", version, about, args_override_self = true)]
pub struct EnrichConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    /// Each provider's time limit; a slower one is left out and named in `degraded`.
    #[arg(long, env = "NPCMEM_ENRICH_PROVIDER_TIMEOUT_MS", default_value_t = 40)]
    pub enrich_provider_timeout_ms: u64,
    /// How long a pair's data stays cached (writers invalidate it sooner).
    #[arg(long, env = "NPCMEM_ENRICH_CACHE_TTL_SECS", default_value_t = 300)]
    pub enrich_cache_ttl_secs: u64,
    /// Pairs kept in the cache.
    #[arg(long, env = "NPCMEM_ENRICH_CACHE_CAPACITY", default_value_t = 10_000)]
    pub enrich_cache_capacity: u64,
    /// Memory the cached pairs may take in all, by their estimated size (a pair with
    /// 1,000 turns and 200 memories takes about 0.5 MB); the least used go first.
    #[arg(long, env = "NPCMEM_ENRICH_CACHE_MAX_MB", default_value_t = 1_024)]
    pub enrich_cache_max_mb: u64,
    /// `max_tokens` when a request gives none.
    #[arg(long, env = "NPCMEM_ENRICH_DEFAULT_MAX_TOKENS", default_value_t = 1024)]
    pub enrich_default_max_tokens: u32,
    /// Overrides of the providers' token shares, e.g. `memory=0.3,knowledge=0.05`
    /// (defaults: memory 0.25, relationship 0.10, knowledge 0.10, working_memory 0.10, mood 0.05).
    #[arg(long, env = "NPCMEM_ENRICH_BUDGETS", default_value = "")]
    pub enrich_budgets: String,
    /// Recall reads at most this many of a pair's newest turns (the consolidate service
    /// evicts older ones with the same setting).
    #[arg(long, env = "NPCMEM_RECALL_MAX_TURNS_PER_PAIR", default_value_t = DEFAULT_RECALL_MAX_TURNS)]
    pub recall_max_turns_per_pair: i64,
    /// How often access counts of memories that went into prompts are written back.
    #[arg(long, env = "NPCMEM_ENRICH_ACCESS_FLUSH_MS", default_value_t = 5_000)]
    pub enrich_access_flush_ms: u64,
    #[command(flatten)]
    pub embed: EmbedArgs,
}

/// Turns kept per pair by default (see docs/operations.md for the bytes per turn).
pub const DEFAULT_RECALL_MAX_TURNS: i64 = 5_000;

/// Smallest and largest `max_tokens` a request may ask for.
pub const MAX_TOKENS_RANGE: std::ops::RangeInclusive<u32> = 64..=32_768;

impl EnrichConfig {
    pub fn budgets(&self) -> Result<BudgetManager, ServiceError> {
        BudgetManager::with_overrides(&self.enrich_budgets)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_ENRICH_BUDGETS: {error}")))
    }

    pub fn validate(&self) -> Result<(), ServiceError> {
        self.budgets()?;
        self.embed.validate()?;
        if !MAX_TOKENS_RANGE.contains(&self.enrich_default_max_tokens) {
            return Err(ServiceError::Config("NPCMEM_ENRICH_DEFAULT_MAX_TOKENS must be 64..=32768".into()));
        }
        if self.recall_max_turns_per_pair < 1 {
            return Err(ServiceError::Config("NPCMEM_RECALL_MAX_TURNS_PER_PAIR must be positive".into()));
        }
        if self.enrich_provider_timeout_ms == 0 {
            return Err(ServiceError::Config("NPCMEM_ENRICH_PROVIDER_TIMEOUT_MS must be positive".into()));
        }
        Ok(())
    }

    pub fn provider_timeout(&self) -> Duration {
        Duration::from_millis(self.enrich_provider_timeout_ms)
    }
}
