//! Commands that change memories by hand — `clear`, `inject`, `lock`, `unlock` — and
//! `history`, which shows the admin_actions log they write. Each change and its log row
//! commit together; enrichers are told to drop the pair's cache afterwards.

use std::io::Write;

use chrono::Utc;
use npcmem_core::memory::{MemoryType, SafetyFlag, SalienceInputs, compute_salience, round3};
use npcmem_core::redact::PiiRedactor;
use npcmem_core::wire::CacheInvalidate;
use npcmem_store::admin::{self, AdminMemory};
use npcmem_store::locks::{self, PairScope};
use npcmem_store::memories;
use serde_json::json;
use uuid::Uuid;

use crate::Context;
use crate::error::CliError;
use crate::table::{Table, time};

/// The memories table's content limit (migration 0002).
const MAX_CONTENT_CHARS: usize = 2_000;
const MAX_TAGS: usize = 20;
const MAX_TAG_CHARS: usize = 50;

#[derive(Debug, clap::Args)]
pub struct ClearArgs {
    /// The NPC's id.
    npc: Uuid,
    /// The player's id; without it every pair of the NPC is cleared.
    player: Option<Uuid>,
    /// Really delete (without it the command only says what it would delete).
    #[arg(long)]
    yes: bool,
    /// Keep locked memories.
    #[arg(long)]
    keep_locked: bool,
}

pub async fn clear(context: &Context, args: ClearArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let scope = match args.player {
        Some(player_id) => format!("NPC {} and player {player_id}", args.npc),
        None => format!("NPC {} (every player)", args.npc),
    };
    let pool = context.postgres().await?;
    if !args.yes {
        let mut connection = pool.acquire().await?;
        let memories = npcmem_store::inspect::count_memories(&mut connection, args.npc, args.player).await?;
        return Err(CliError::BadInput(format!(
            "clear deletes the {memories} memories and the working memory of {scope}; run it again with --yes to do it"
        )));
    }
    let mut transaction = pool.begin().await?;
    if let Some(player_id) = args.player {
        // The same locks extract and ingest take for the pair, so a batch in flight
        // cannot trim or cap against rows this deletes.
        locks::lock_pairs(&mut transaction, PairScope::Memories, &[(args.npc, player_id)]).await?;
        locks::lock_pairs(&mut transaction, PairScope::WorkingMemory, &[(args.npc, player_id)]).await?;
    }
    let cleared = admin::clear_memories(&mut transaction, args.npc, args.player, args.keep_locked).await?;
    let details = json!({
        "npc_id": args.npc,
        "player_id": args.player,
        "keep_locked": args.keep_locked,
        "memories": cleared.memories,
        "working_memory": cleared.working_memory,
        "locked_kept": cleared.locked_kept,
    });
    admin::record_action(&mut transaction, &actor, "clear", &details).await?;
    transaction.commit().await?;
    context.invalidate_caches(&[CacheInvalidate { npc_id: Some(args.npc), player_id: args.player }]).await;
    write!(
        out,
        "cleared {scope}: {} memories, {} working-memory summaries deleted",
        cleared.memories, cleared.working_memory
    )?;
    if args.keep_locked {
        write!(out, ", {} locked memories kept", cleared.locked_kept)?;
    }
    writeln!(out)?;
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MemoryKind {
    Episodic,
    Semantic,
    Procedural,
}

impl From<MemoryKind> for MemoryType {
    fn from(kind: MemoryKind) -> Self {
        match kind {
            MemoryKind::Episodic => MemoryType::Episodic,
            MemoryKind::Semantic => MemoryType::Semantic,
            MemoryKind::Procedural => MemoryType::Procedural,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// The NPC's id.
    npc: Uuid,
    /// The player's id.
    player: Uuid,
    /// What the NPC remembers (1–2,000 characters; real-world PII is redacted).
    #[arg(long)]
    content: String,
    #[arg(long = "type", value_enum, default_value = "episodic")]
    memory_type: MemoryKind,
    /// 0.0–1.0; admin memories may reach 1.0 (extracted ones stop at 0.7).
    #[arg(long, default_value_t = 0.8)]
    importance: f64,
    /// Comma-separated tags, e.g. `quest,trade`.
    #[arg(long, value_delimiter = ',')]
    tags: Vec<String>,
    /// Store it unlocked, so decay and the growth caps apply (admin memories are locked by default).
    #[arg(long)]
    unlocked: bool,
}

fn validated_tags(raw: &[String]) -> Result<Vec<String>, CliError> {
    let mut tags: Vec<String> = Vec::new();
    for tag in raw.iter().map(|tag| tag.trim().to_lowercase()).filter(|tag| !tag.is_empty()) {
        if tag.chars().count() > MAX_TAG_CHARS {
            return Err(CliError::BadInput(format!("--tags: {tag:?} is longer than {MAX_TAG_CHARS} characters")));
        }
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(CliError::BadInput(format!("--tags: at most {MAX_TAGS} tags")));
    }
    Ok(tags)
}

pub async fn inject(context: &Context, args: InjectArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let content = args.content.trim();
    let content_chars = content.chars().count();
    if content_chars == 0 || content_chars > MAX_CONTENT_CHARS {
        return Err(CliError::BadInput(format!(
            "--content must be 1 to {MAX_CONTENT_CHARS} characters (got {content_chars})"
        )));
    }
    if !(0.0..=1.0).contains(&args.importance) {
        return Err(CliError::BadInput(format!("--importance must be within 0.0 and 1.0 (got {})", args.importance)));
    }
    let tags = validated_tags(&args.tags)?;
    // real-world PII never reaches the database, whoever writes it.
    let redacted = PiiRedactor::shared().redact(content);
    let safety_flag = if redacted != content { SafetyFlag::Redacted } else { SafetyFlag::Clean };
    let now = Utc::now();
    let importance = round3(args.importance);
    let locked = !args.unlocked;
    let memory_type = MemoryType::from(args.memory_type);
    let memory = AdminMemory {
        id: Uuid::now_v7(),
        npc_id: args.npc,
        player_id: args.player,
        memory_type,
        content: redacted.into_owned(),
        tags,
        importance,
        salience: round3(compute_salience(
            &SalienceInputs { importance, last_accessed: now, access_count: 0, locked, emotional_intensity: 0.0 },
            now,
        )),
        locked,
        safety_flag,
        created_at: now,
    };

    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    locks::lock_pairs(&mut transaction, PairScope::Memories, &[(args.npc, args.player)]).await?;
    admin::insert_memory(&mut transaction, &memory).await?;
    let evicted = memories::enforce_cap(&mut transaction, args.npc, args.player, memory_type).await?;
    let details = json!({
        "memory_id": memory.id,
        "npc_id": memory.npc_id,
        "player_id": memory.player_id,
        "memory_type": memory_type.as_str(),
        "content": memory.content,
        "tags": memory.tags,
        "importance": importance,
        "locked": locked,
        "safety_flag": safety_flag.as_str(),
        "evicted": evicted,
    });
    admin::record_action(&mut transaction, &actor, "inject", &details).await?;
    transaction.commit().await?;
    // No event.memory.stored: only extract emits it, so an admin memory
    // never re-applies relationship deltas.
    context.invalidate_caches(&[CacheInvalidate { npc_id: Some(args.npc), player_id: Some(args.player) }]).await;
    writeln!(
        out,
        "injected memory {} ({}, importance {importance:.3}, {}) for NPC {} and player {}",
        memory.id,
        memory_type.as_str(),
        if locked { "locked" } else { "unlocked" },
        args.npc,
        args.player
    )?;
    if safety_flag == SafetyFlag::Redacted {
        writeln!(out, "note: real-world PII was redacted from the content")?;
    }
    if evicted > 0 {
        writeln!(out, "note: the pair was at its {} cap; {evicted} unlocked memories evicted", memory_type.as_str())?;
    }
    Ok(())
}

pub async fn set_locked(context: &Context, memory_id: Uuid, locked: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let actor = context.options.actor()?;
    let verb = if locked { "locked" } else { "unlocked" };
    let pool = context.postgres().await?;
    let mut transaction = pool.begin().await?;
    let Some(change) = admin::set_locked(&mut transaction, memory_id, locked).await? else {
        return Err(CliError::NotFound(format!("no memory with id {memory_id}")));
    };
    if change.was_locked == locked {
        transaction.rollback().await?;
        writeln!(out, "memory {memory_id} was already {verb}; nothing changed")?;
        return Ok(());
    }
    let action = if locked { "lock" } else { "unlock" };
    let details = json!({ "memory_id": memory_id, "npc_id": change.npc_id, "player_id": change.player_id });
    admin::record_action(&mut transaction, &actor, action, &details).await?;
    transaction.commit().await?;
    // Locking changes how enrich ranks the memory (locked memories do not age).
    context.invalidate_caches(&[CacheInvalidate { npc_id: Some(change.npc_id), player_id: change.player_id }]).await;
    writeln!(out, "memory {memory_id} {verb}")?;
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Only this action (clear, inject, lock, unlock, audit.review, dlq.replay, dlq.purge, …).
    #[arg(long)]
    action: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn history(context: &Context, args: HistoryArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    let actions = admin::recent_actions(&mut connection, args.action.as_deref(), args.limit).await?;
    if args.json {
        let document = serde_json::to_string_pretty(&actions).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{document}")?;
        return Ok(());
    }
    if actions.is_empty() {
        writeln!(out, "no admin actions recorded")?;
        return Ok(());
    }
    let mut table = Table::new(&["id", "at", "actor", "action", "details"]);
    for action in &actions {
        table.row(vec![
            action.id.to_string(),
            time(action.at),
            action.actor.clone(),
            action.action.clone(),
            action.details.to_string(),
        ]);
    }
    table.write(out)?;
    Ok(())
}
