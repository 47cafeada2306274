use npcmem_core::consolidation::Schedule;
use npcmem_service::llm::LlmArgs;
use npcmem_service::{CommonConfig, ServiceError};

/// npcmem-consolidate: decay, growth caps, consolidation and reinforcement on a schedule.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-consolidate", version, about, args_override_self = true)]
pub struct ConsolidateConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub jobs: JobArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// When decay runs: `daily HH:MM` (UTC) or `every <N>s|m|h|d`.
    #[arg(long, env = "NPCMEM_DECAY_SCHEDULE", default_value = "daily 03:00")]
    pub decay_schedule: String,
    /// When the consolidation backlog is fanned out on `P.job.consolidate`.
    #[arg(long, env = "NPCMEM_CONSOLIDATE_SCHEDULE", default_value = "daily 04:00")]
    pub consolidate_schedule: String,
    /// When procedural patterns are reinforced.
    #[arg(long, env = "NPCMEM_REINFORCE_SCHEDULE", default_value = "daily 04:30")]
    pub reinforce_schedule: String,
    /// LLM consolidations per (sliding) minute, all replicas together; beyond it the
    /// rules summariser takes over.
    #[arg(long, env = "NPCMEM_MEMORY_CONSOLIDATION_RPM", default_value_t = 5)]
    pub memory_consolidation_rpm: i64,
    /// How often a replica checks whether a job is due (and takes over a dead leader's).
    #[arg(long, env = "NPCMEM_SCHEDULER_POLL_MS", default_value_t = 5_000)]
    pub scheduler_poll_ms: u64,
    /// Heap pages of `memories` one decay statement covers.
    #[arg(long, env = "NPCMEM_DECAY_BATCH_PAGES", default_value_t = 2_000)]
    pub decay_batch_pages: i64,
    /// Slices of the NPC id space the prune and reinforce passes work through.
    #[arg(long, env = "NPCMEM_MAINTENANCE_SLICES", default_value_t = 32)]
    pub maintenance_slices: u32,
    /// Turns kept per pair for recall; decay blanks the oldest transcripts beyond it.
    #[arg(long, env = "NPCMEM_RECALL_MAX_TURNS_PER_PAIR", default_value_t = 5_000)]
    pub recall_max_turns_per_pair: i64,
}

impl ConsolidateConfig {
    pub fn validate(&self) -> Result<(), ServiceError> {
        self.llm.validate()?;
        self.jobs.schedules()?;
        if self.jobs.decay_batch_pages < 1
            || self.jobs.maintenance_slices < 1
            || self.jobs.recall_max_turns_per_pair < 1
        {
            return Err(ServiceError::Config(
                "NPCMEM_DECAY_BATCH_PAGES, NPCMEM_MAINTENANCE_SLICES and NPCMEM_RECALL_MAX_TURNS_PER_PAIR must be positive"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl JobArgs {
    /// (decay, consolidate, reinforce) schedules.
    pub fn schedules(&self) -> Result<[Schedule; 3], ServiceError> {
        let parse = |name: &str, text: &str| {
            Schedule::parse(text).map_err(|error| ServiceError::Config(format!("{name}: {error}")))
        };
        Ok([
            parse("NPCMEM_DECAY_SCHEDULE", &self.decay_schedule)?,
            parse("NPCMEM_CONSOLIDATE_SCHEDULE", &self.consolidate_schedule)?,
            parse("NPCMEM_REINFORCE_SCHEDULE", &self.reinforce_schedule)?,
        ])
    }
}
