//! `npcmem inspect NPC [PLAYER]`: everything stored about an NPC (or one of its pairs), as
//! aligned tables or, with `--json`, one JSON document.

use std::io::Write;

use npcmem_store::inspect::{self, FactView, MemoryView, RelationshipView, WorkingMemoryView};
use serde::Serialize;
use uuid::Uuid;

use crate::Context;
use crate::error::CliError;
use crate::table::{Table, number, optional, time};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The NPC's id.
    npc: Uuid,
    /// The player's id: only this pair's memories and relationship, and what the NPC
    /// knows about this player.
    player: Option<Uuid>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Rows per section at most.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
}

#[derive(Debug, Serialize)]
struct Inspection {
    npc_id: Uuid,
    player_id: Option<Uuid>,
    relationships: Vec<RelationshipView>,
    memories: Vec<MemoryView>,
    working_memory: Vec<WorkingMemoryView>,
    knowledge: Vec<FactView>,
}

pub async fn run(context: &Context, args: InspectArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let pool = context.postgres().await?;
    let mut connection = pool.acquire().await?;
    let inspection = Inspection {
        npc_id: args.npc,
        player_id: args.player,
        relationships: inspect::relationships(&mut connection, args.npc, args.player, args.limit).await?,
        memories: inspect::memories(&mut connection, args.npc, args.player, args.limit).await?,
        working_memory: inspect::working_memory(&mut connection, args.npc, args.player, args.limit).await?,
        knowledge: inspect::knowledge(&mut connection, args.npc, args.player, args.limit).await?,
    };
    if args.json {
        let document = serde_json::to_string_pretty(&inspection).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{document}")?;
        return Ok(());
    }
    write_tables(&inspection, out)?;
    Ok(())
}

fn write_tables(inspection: &Inspection, out: &mut dyn Write) -> std::io::Result<()> {
    match inspection.player_id {
        Some(player_id) => writeln!(out, "NPC {} and player {player_id}", inspection.npc_id)?,
        None => writeln!(out, "NPC {} (every player)", inspection.npc_id)?,
    }

    let mut relationships = Table::new(&[
        "player",
        "stage",
        "disposition",
        "trust",
        "fear",
        "respect",
        "loyalty",
        "friendliness",
        "romance",
        "interactions",
        "memories",
        "version",
        "last interaction",
    ]);
    for relationship in &inspection.relationships {
        relationships.row(vec![
            relationship.player_id.to_string(),
            relationship.stage.clone(),
            number(relationship.disposition),
            number(relationship.trust),
            number(relationship.fear),
            number(relationship.respect),
            number(relationship.loyalty),
            number(relationship.friendliness),
            number(relationship.romantic_interest),
            relationship.interaction_count.to_string(),
            relationship.memory_count.to_string(),
            relationship.version.to_string(),
            optional(relationship.last_interaction.map(time)),
        ]);
    }
    section(out, "relationships", inspection.relationships.len(), &relationships)?;

    let mut memories = Table::new(&[
        "id",
        "player",
        "type",
        "importance",
        "salience",
        "confidence",
        "flag",
        "locked",
        "extractor",
        "created",
        "tags",
        "content",
    ]);
    for memory in &inspection.memories {
        memories.row(vec![
            memory.id.to_string(),
            optional(memory.player_id),
            memory.memory_type.clone(),
            number(memory.importance),
            number(memory.salience),
            number(memory.confidence),
            memory.safety_flag.clone(),
            if memory.locked { "yes".into() } else { "no".into() },
            optional(memory.extractor.clone()),
            time(memory.created_at),
            memory.tags.join(","),
            memory.content.clone(),
        ]);
    }
    section(out, "memories", inspection.memories.len(), &memories)?;

    let mut working_memory = Table::new(&["ended", "player", "conversation", "summary"]);
    for summary in &inspection.working_memory {
        working_memory.row(vec![
            time(summary.ended_at),
            summary.player_id.to_string(),
            summary.conversation_id.to_string(),
            summary.summary.clone(),
        ]);
    }
    section(out, "working memory", inspection.working_memory.len(), &working_memory)?;

    let mut knowledge =
        Table::new(&["id", "category", "subject", "importance", "confidence", "source", "hops", "state", "content"]);
    for fact in &inspection.knowledge {
        let state = match (fact.superseded_by, fact.expires_at) {
            (Some(_), _) => "superseded",
            (None, Some(expires_at)) if expires_at <= chrono::Utc::now() => "expired",
            _ => "valid",
        };
        knowledge.row(vec![
            fact.id.to_string(),
            fact.category.clone(),
            optional(fact.subject_id),
            number(fact.importance),
            number(fact.confidence),
            fact.source.clone(),
            fact.hop_count.to_string(),
            state.into(),
            fact.content.clone(),
        ]);
    }
    let knowledge_title = if inspection.player_id.is_some() { "knowledge about the player" } else { "knowledge" };
    section(out, knowledge_title, inspection.knowledge.len(), &knowledge)?;
    Ok(())
}

fn section(out: &mut dyn Write, title: &str, count: usize, table: &Table) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "{title} ({count})")?;
    if table.is_empty() { writeln!(out, "  none") } else { table.write(out) }
}
