//! `npcmem factions load FILE`: loads a factions file (see deploy/examples/factions.toml)
//! into the database, as relate's `NPCMEM_FACTIONS_FILE` does at start.

use std::io::Write;
use std::path::{Path, PathBuf};

use npcmem_core::relationship::factions::FactionsFile;
use npcmem_store::{admin, relationships};
use serde_json::json;

use crate::Context;
use crate::error::CliError;

#[derive(Debug, clap::Subcommand)]
pub enum FactionsCommand {
    /// Upsert the file's factions, replace their attitudes, record its NPC memberships.
    /// Loading the same file twice changes nothing.
    Load { file: PathBuf },
}

pub async fn run(context: &Context, command: FactionsCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        FactionsCommand::Load { file } => load(context, &file, out).await,
    }
}

async fn load(context: &Context, path: &Path, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let text = std::fs::read_to_string(path)
        .map_err(|error| CliError::BadInput(format!("cannot read {}: {error}", path.display())))?;
    let file = FactionsFile::from_toml(&text)
        .map_err(|error| CliError::BadInput(format!("{} is not a usable factions file: {error}", path.display())))?;
    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    let loaded = relationships::load_factions_file(&mut transaction, &file).await?;
    let details = json!({
        "file": path.display().to_string(),
        "factions": loaded.factions,
        "attitudes": loaded.attitudes,
        "npcs": loaded.npcs,
    });
    admin::record_action(&mut transaction, &actor, "factions.load", &details).await?;
    transaction.commit().await?;
    writeln!(
        out,
        "loaded {}: {} factions, {} attitudes, {} NPC memberships",
        path.display(),
        loaded.factions,
        loaded.attitudes,
        loaded.npcs
    )?;
    Ok(())
}
