//! `npcmem recall backfill`: gives every recorded turn a vector of the configured
//! embedding model, so recall's dense ranking covers history from before the embedder
//! was configured (or a new model). Idempotent: what has vectors of the model is skipped,
//! so it can be stopped and run again.

use std::io::Write;
use std::time::Instant;

use npcmem_core::wire::CacheInvalidate;
use npcmem_service::embed::{EmbedArgs, embed_conversations};
use npcmem_store::admin;
use npcmem_store::recall as turns;
use serde_json::json;

use crate::error::CliError;
use crate::{Context, connect};

#[derive(Debug, clap::Subcommand)]
pub enum RecallCommand {
    /// Embed every turn that has no vector of the configured model yet.
    Backfill {
        #[command(flatten)]
        embed: EmbedArgs,
        /// Conversations read and stored per round.
        #[arg(long, default_value_t = 64)]
        page: i64,
    },
}

pub async fn run(context: &Context, command: RecallCommand, out: &mut dyn Write) -> Result<(), CliError> {
    let RecallCommand::Backfill { embed, page } = command;
    embed.validate().map_err(|error| CliError::BadInput(error.to_string()))?;
    if !(1..=10_000).contains(&page) {
        return Err(CliError::BadInput("--page must be 1..=10000".into()));
    }
    let Some(embedder) = embed.embedder().map_err(|error| CliError::BadInput(error.to_string()))? else {
        return Err(CliError::BadInput("set NPCMEM_EMBED_PROVIDER (openai or minilm) to backfill".into()));
    };
    let actor = context.options.actor()?;
    let pool = connect::postgres_with(&context.common, context.options.connect_timeout(), 2).await?;
    let model = embedder.model().to_owned();
    let total = {
        let mut connection = pool.acquire().await?;
        turns::count_unembedded(&mut connection, &model).await?
    };
    let progress = indicatif::ProgressBar::new(total.max(0) as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {pos}/{len} conversations ({per_sec}, {eta} left) {wide_bar} {msg}",
        )
        .expect("the template is valid"),
    );
    let started = Instant::now();
    let (mut conversations, mut embedded_turns) = (0_u64, 0_usize);
    let mut pairs = std::collections::BTreeSet::new();
    let mut after = None;
    loop {
        let pending = {
            let mut connection = pool.acquire().await?;
            turns::unembedded_after(&mut connection, &model, after, page).await?
        };
        let Some(last) = pending.last() else {
            break;
        };
        after = Some(last.conversation_id);
        let count = pending.len() as u64;
        pairs.extend(pending.iter().map(|c| (c.npc_id, c.player_id)));
        let done = embed_conversations(&pool, &embedder, pending, embed.embed_batch)
            .await
            .map_err(|error| CliError::Failed(format!("{error} (what was stored stays; run again to go on)")))?;
        conversations += count;
        embedded_turns += done;
        progress.inc(count);
        progress.set_message(format!("{embedded_turns} turns"));
    }
    progress.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let summary = json!({
        "model": model,
        "conversations": conversations,
        "turns": embedded_turns,
        "seconds": (seconds * 10.0).round() / 10.0,
        "turns_per_second": if seconds > 0.0 { (embedded_turns as f64 / seconds).round() } else { 0.0 },
    });
    let mut connection = pool.acquire().await?;
    admin::record_action(&mut connection, &actor, "recall.backfill", &summary).await?;
    drop(connection);
    let messages: Vec<CacheInvalidate> = pairs
        .into_iter()
        .map(|(npc_id, player_id)| CacheInvalidate { npc_id: Some(npc_id), player_id: Some(player_id) })
        .collect();
    if !messages.is_empty() {
        context.invalidate_caches(&messages).await;
    }
    let text = serde_json::to_string_pretty(&summary).map_err(|error| CliError::failed("json", error))?;
    writeln!(out, "{text}")?;
    Ok(())
}
