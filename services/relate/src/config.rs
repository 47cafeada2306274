use std::path::PathBuf;

use npcmem_core::relationship::RelateRules;
use npcmem_core::relationship::factions::FactionsFile;
use npcmem_service::{CommonConfig, ServiceError};

/// npcmem-relate: turns extracted memories into relationship changes and story signals.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-relate", version, about, args_override_self = true)]
pub struct RelateConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    /// TOML file replacing any of the relate tables (tag map, valence adjustments,
    /// thresholds, farming cap, milestone interval, faction attitudes); the original design's values
    /// otherwise. See docs/relationships.md.
    #[arg(long, env = "NPCMEM_RELATE_RULES")]
    pub relate_rules: Option<PathBuf>,
    /// Factions file (TOML) loaded at start, as `npcmem factions load` would.
    #[arg(long, env = "NPCMEM_FACTIONS_FILE")]
    pub factions_file: Option<PathBuf>,
    /// Attempts of a batch whose relationships another writer changed first, before its
    /// events are naked and redelivered later.
    #[arg(long, env = "NPCMEM_RELATE_MAX_RETRIES", default_value_t = 8)]
    pub relate_max_retries: u32,
}

impl RelateConfig {
    /// The rules from `NPCMEM_RELATE_RULES`, checked; a bad file stops the start.
    pub fn rules(&self) -> Result<RelateRules, ServiceError> {
        let Some(path) = &self.relate_rules else { return Ok(RelateRules::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_RELATE_RULES {}: {error}", path.display())))?;
        RelateRules::from_toml(&text)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_RELATE_RULES {}: {error}", path.display())))
    }

    pub fn factions(&self) -> Result<Option<FactionsFile>, ServiceError> {
        let Some(path) = &self.factions_file else { return Ok(None) };
        let text = std::fs::read_to_string(path)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_FACTIONS_FILE {}: {error}", path.display())))?;
        FactionsFile::from_toml(&text)
            .map(Some)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_FACTIONS_FILE {}: {error}", path.display())))
    }
}
