use npcmem_service::CommonConfig;

/// Which extractor turns conversations into memories (DESIGN §6 `NPCMEM_LLM_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LlmProvider {
    /// The offline rule-based extractor (seed §Fallback Strategies): no network, no budget.
    Rules,
}

/// npcmem-extract: turns recorded conversations into NPC memories.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-extract", version, about, args_override_self = true)]
pub struct ExtractConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    #[arg(long, env = "NPCMEM_LLM_PROVIDER", value_enum, default_value = "rules")]
    pub llm_provider: LlmProvider,
}
