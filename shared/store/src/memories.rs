//! Memories with the growth caps
//! enforced on insert, and the audit trail of flagged memories.

use chrono::{DateTime, Utc};
use npcmem_core::memory::{MEMORY_CAPS, MemoryType};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// A memory to insert. Type-specific columns not listed keep their defaults.
#[derive(Debug, Clone)]
pub struct NewMemory {
    pub id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub memory_type: MemoryType,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub confidence: f64,
    pub salience: f64,
    pub location: Option<String>,
    pub emotional_valence: &'static str,
    pub emotional_intensity: f64,
    pub safety_flag: &'static str,
    pub source_conversation_id: Option<Uuid>,
    pub extractor: &'static str,
    pub created_at: DateTime<Utc>,
    /// Who did it to whom, when known.
    pub actor_id: Option<Uuid>,
    pub target_id: Option<Uuid>,
}

/// Inserts the memories (ignoring ids that exist) in one statement.
pub async fn insert_batch(connection: &mut PgConnection, memories: &[NewMemory]) -> StoreResult<()> {
    if memories.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = memories.iter().map(|m| m.id).collect();
    let npc_ids: Vec<Uuid> = memories.iter().map(|m| m.npc_id).collect();
    let player_ids: Vec<Uuid> = memories.iter().map(|m| m.player_id).collect();
    let types: Vec<&str> = memories.iter().map(|m| m.memory_type.as_str()).collect();
    let contents: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
    // Tags vary in length per row; a JSON array per row avoids ragged text[][] arrays.
    let tags: Vec<String> =
        memories.iter().map(|m| serde_json::to_string(&m.tags).expect("tags always serialise")).collect();
    let importance: Vec<f64> = memories.iter().map(|m| m.importance).collect();
    let confidence: Vec<f64> = memories.iter().map(|m| m.confidence).collect();
    let salience: Vec<f64> = memories.iter().map(|m| m.salience).collect();
    let locations: Vec<Option<&str>> = memories.iter().map(|m| m.location.as_deref()).collect();
    let valences: Vec<&str> = memories.iter().map(|m| m.emotional_valence).collect();
    let intensities: Vec<f64> = memories.iter().map(|m| m.emotional_intensity).collect();
    let flags: Vec<&str> = memories.iter().map(|m| m.safety_flag).collect();
    let sources: Vec<Option<Uuid>> = memories.iter().map(|m| m.source_conversation_id).collect();
    let extractors: Vec<&str> = memories.iter().map(|m| m.extractor).collect();
    let created: Vec<DateTime<Utc>> = memories.iter().map(|m| m.created_at).collect();
    let actors: Vec<Option<Uuid>> = memories.iter().map(|m| m.actor_id).collect();
    let targets: Vec<Option<Uuid>> = memories.iter().map(|m| m.target_id).collect();
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence,
             salience, location, emotional_valence, emotional_intensity, safety_flag,
             source_conversation_id, extractor, created_at, last_accessed, actor_id, target_id)
         SELECT id, npc_id, player_id, memory_type, content,
                ARRAY(SELECT jsonb_array_elements_text(tags::jsonb)), importance, confidence, salience,
                location, emotional_valence, emotional_intensity, safety_flag, source_conversation_id,
                extractor, created_at, created_at, actor_id, target_id
         FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                     $7::float8[], $8::float8[], $9::float8[], $10::text[], $11::text[], $12::float8[],
                     $13::text[], $14::uuid[], $15::text[], $16::timestamptz[], $17::uuid[], $18::uuid[])
              AS m(id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                   location, emotional_valence, emotional_intensity, safety_flag,
                   source_conversation_id, extractor, created_at, actor_id, target_id)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&ids)
    .bind(&npc_ids)
    .bind(&player_ids)
    .bind(&types)
    .bind(&contents)
    .bind(&tags)
    .bind(&importance)
    .bind(&confidence)
    .bind(&salience)
    .bind(&locations)
    .bind(&valences)
    .bind(&intensities)
    .bind(&flags)
    .bind(&sources)
    .bind(&extractors)
    .bind(&created)
    .bind(&actors)
    .bind(&targets)
    .execute(connection)
    .await?;
    Ok(())
}

/// Deletes unlocked memories of one pair and type beyond the cap; see [`enforce_caps`].
pub async fn enforce_cap(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
    memory_type: MemoryType,
) -> StoreResult<u64> {
    enforce_caps(connection, &[(npc_id, player_id)], memory_type).await
}

/// Deletes, for every given pair, the unlocked memories of `memory_type` beyond the cap,
/// in the original design's eviction order (episodic: lowest salience; semantic: lowest confidence;
/// procedural: lowest reinforcement_count; oldest first on ties) — one statement for the
/// whole batch. Locked memories count towards the cap but are never evicted. The caller
/// holds the pairs' locks (`PairScope::Memories`). Returns the rows deleted.
pub async fn enforce_caps(
    connection: &mut PgConnection,
    pairs: &[(Uuid, Uuid)],
    memory_type: MemoryType,
) -> StoreResult<u64> {
    if pairs.is_empty() {
        return Ok(0);
    }
    // The eviction key per type; only these fixed strings
    // ever reach the statement.
    let eviction_order = match memory_type {
        MemoryType::Episodic => "salience ASC",
        MemoryType::Semantic => "confidence ASC",
        MemoryType::Procedural => "reinforcement_count ASC",
    };
    let statement = format!(
        "DELETE FROM memories WHERE id IN (
             SELECT evicted.id
             FROM (SELECT DISTINCT npc_id, player_id FROM UNNEST($1::uuid[], $2::uuid[]) AS p(npc_id, player_id)) AS pair
             CROSS JOIN LATERAL (
                 SELECT id FROM memories AS m
                 WHERE m.npc_id = pair.npc_id AND m.player_id = pair.player_id AND m.memory_type = $4 AND NOT m.locked
                 ORDER BY {eviction_order}, created_at ASC, id
                 LIMIT GREATEST((SELECT count(*) FROM memories AS c
                                 WHERE c.npc_id = pair.npc_id AND c.player_id = pair.player_id
                                   AND c.memory_type = $4) - $3, 0)) AS evicted)"
    );
    let npc_ids: Vec<Uuid> = pairs.iter().map(|(npc, _)| *npc).collect();
    let player_ids: Vec<Uuid> = pairs.iter().map(|(_, player)| *player).collect();
    let cap = MEMORY_CAPS.for_type(memory_type) as i64;
    let result = sqlx::query(sqlx::AssertSqlSafe(statement))
        .bind(&npc_ids)
        .bind(&player_ids)
        .bind(cap)
        .bind(memory_type.as_str())
        .execute(connection)
        .await?;
    Ok(result.rows_affected())
}

/// One flagged memory for admin review.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub memory_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub conversation_id: Uuid,
    pub content: String,
    pub reasons: Vec<String>,
    pub safety_flag: &'static str,
    pub original_importance: f64,
}

pub async fn record_audit(connection: &mut PgConnection, entries: &[AuditEntry]) -> StoreResult<()> {
    for entry in entries {
        sqlx::query(
            "INSERT INTO memory_audit (memory_id, npc_id, player_id, conversation_id, content, reasons,
                 safety_flag, original_importance)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(entry.memory_id)
        .bind(entry.npc_id)
        .bind(entry.player_id)
        .bind(entry.conversation_id)
        .bind(&entry.content)
        .bind(&entry.reasons)
        .bind(entry.safety_flag)
        .bind(entry.original_importance)
        .execute(&mut *connection)
        .await?;
    }
    Ok(())
}
