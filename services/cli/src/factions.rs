//! `npcmem factions load FILE`: loads a factions file (see deploy/examples/factions.toml)
//! into the database, as relate's `NPCMEM_FACTIONS_FILE` does at start.

use std::path::PathBuf;

use anyhow::Context as _;
use npcmem_core::relationship::factions::FactionsFile;
use npcmem_service::CommonConfig;
use npcmem_store::relationships;

#[derive(Debug, clap::Subcommand)]
pub enum FactionsCommand {
    /// Upsert the file's factions, replace their attitudes, record its NPC memberships.
    /// Loading the same file twice changes nothing.
    Load { file: PathBuf },
}

pub async fn run(common: &CommonConfig, command: FactionsCommand) -> anyhow::Result<()> {
    match command {
        FactionsCommand::Load { file } => load(common, &file).await,
    }
}

async fn load(common: &CommonConfig, path: &PathBuf) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file =
        FactionsFile::from_toml(&text).with_context(|| format!("{} is not a usable factions file", path.display()))?;
    let pool = npcmem_store::connect(&common.database_url, &common.pool_options())
        .await
        .context("cannot reach Postgres (NPCMEM_DATABASE_URL)")?;
    npcmem_store::migrate(&pool).await.context("cannot apply the migrations")?;
    let mut transaction = pool.begin().await?;
    let loaded = relationships::load_factions_file(&mut transaction, &file).await?;
    transaction.commit().await?;
    println!(
        "loaded {}: {} factions, {} attitudes, {} NPC memberships",
        path.display(),
        loaded.factions,
        loaded.attitudes,
        loaded.npcs
    );
    Ok(())
}
