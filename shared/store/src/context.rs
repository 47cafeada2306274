//! The read side enrich and the query API use: one pair's memories, knowledge, mood and
//! faction standing, and the batched write-back of memory access counts.

use chrono::{DateTime, Utc};
use npcmem_core::context::ContextMemory;
use npcmem_core::memory::MemoryType;
use npcmem_core::perspective::knowledge_line;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;
use crate::knowledge::PerspectiveColumns;

type MemoryRow = (Uuid, String, String, Vec<String>, f64, bool, f64, i32, DateTime<Utc>, DateTime<Utc>);

fn into_memory(row: MemoryRow) -> Option<ContextMemory> {
    let (
        id,
        memory_type,
        content,
        tags,
        importance,
        locked,
        emotional_intensity,
        access_count,
        last_accessed,
        created_at,
    ) = row;
    Some(ContextMemory {
        id,
        memory_type: MemoryType::parse(&memory_type)?,
        content,
        tags,
        importance,
        locked,
        emotional_intensity,
        access_count: i64::from(access_count),
        last_accessed,
        created_at,
    })
}

/// The pair's memories that may reach a prompt (never `suspect` ones).
pub async fn prompt_memories(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
) -> StoreResult<Vec<ContextMemory>> {
    let rows: Vec<MemoryRow> = sqlx::query_as(
        "SELECT id, memory_type, content, tags, importance, locked, emotional_intensity, access_count, last_accessed,
                created_at
         FROM memories WHERE npc_id = $1 AND player_id = $2 AND safety_flag <> 'suspect'",
    )
    .bind(npc_id)
    .bind(player_id)
    .fetch_all(connection)
    .await?;
    Ok(rows.into_iter().filter_map(into_memory).collect())
}

/// The query API's memory filter (seed MemoryQueryAPI).
#[derive(Debug, Clone, Default)]
pub struct MemoryFilter {
    /// All must be present.
    pub tags: Vec<String>,
    pub min_importance: Option<f64>,
    pub memory_type: Option<MemoryType>,
    pub content_contains: Option<String>,
    pub limit: i64,
}

/// Matching memories (most important first, then newest) and how many match in all.
pub async fn query_memories(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
    filter: &MemoryFilter,
) -> StoreResult<(i64, Vec<ContextMemory>)> {
    let pattern =
        filter.content_contains.as_ref().map(|text| format!("%{}%", text.replace('%', "\\%").replace('_', "\\_")));
    let condition = "npc_id = $1 AND player_id = $2 AND safety_flag <> 'suspect' AND tags @> $3
        AND importance >= $4 AND ($5::text IS NULL OR memory_type = $5) AND ($6::text IS NULL OR content ILIKE $6)";
    let count: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM memories WHERE {condition}")))
            .bind(npc_id)
            .bind(player_id)
            .bind(&filter.tags)
            .bind(filter.min_importance.unwrap_or(0.0))
            .bind(filter.memory_type.map(|t| t.as_str()))
            .bind(&pattern)
            .fetch_one(&mut *connection)
            .await?;
    let rows: Vec<MemoryRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, memory_type, content, tags, importance, locked, emotional_intensity, access_count, last_accessed,
                created_at
         FROM memories WHERE {condition} ORDER BY importance DESC, created_at DESC LIMIT $7"
    )))
    .bind(npc_id)
    .bind(player_id)
    .bind(&filter.tags)
    .bind(filter.min_importance.unwrap_or(0.0))
    .bind(filter.memory_type.map(|t| t.as_str()))
    .bind(&pattern)
    .bind(filter.limit)
    .fetch_all(connection)
    .await?;
    Ok((count, rows.into_iter().filter_map(into_memory).collect()))
}

/// A knowledge fact as the read side shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fact {
    pub id: Uuid,
    pub category: String,
    pub subject_id: Option<Uuid>,
    pub content: String,
    pub tags: Vec<String>,
    pub confidence: f64,
    pub importance: f64,
    pub source: String,
    /// Not on the wire: a cached fact stops showing once this passes.
    #[serde(skip)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Not on the wire: the holder's own memory the fact was learned from, if any.
    #[serde(skip)]
    pub source_memory_id: Option<Uuid>,
    /// How the fact reads in its holder's prompt: its own experience as remembered, or
    /// heard from whom and how far believed (`npcmem_core::perspective::knowledge_line`).
    pub told: String,
}

impl Fact {
    /// Whether the fact still holds at `now` (a cache may keep it past its expiry).
    pub fn valid_at(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// What `npc_id` knows that is still valid (not expired, not superseded), most important
/// first; `tag` and `subject_id` narrow it. With `first_about`, facts about that player
/// come before the rest, as the original design's relevant knowledge has it: an NPC
/// talking to a player recalls what it has heard of them before the world's news.
pub async fn knowledge(
    connection: &mut PgConnection,
    npc_id: Uuid,
    now: DateTime<Utc>,
    tag: Option<&str>,
    subject_id: Option<Uuid>,
    first_about: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Fact>> {
    let rows: Vec<KnowledgeRow> = sqlx::query_as(
        "SELECT k.id, k.category, k.subject_id, k.content, k.tags, k.confidence, k.importance, k.source, k.expires_at,
                k.source_memory_id,
                k.hop_count, k.speaker_id, teller.name AS teller_name, k.actor_id, k.target_id, k.statement,
                k.about_npc_id, k.about_npc_name, k.about_player_name
         FROM knowledge_facts k LEFT JOIN npc_profiles teller ON teller.npc_id = k.speaker_id
         WHERE k.npc_id = $1 AND (k.expires_at IS NULL OR k.expires_at > $2) AND k.superseded_by IS NULL
           AND ($3::text IS NULL OR $3 = ANY(k.tags)) AND ($4::uuid IS NULL OR k.subject_id = $4)
         ORDER BY coalesce(k.subject_id = $6, false) DESC, k.importance DESC, k.confidence DESC, k.created_at DESC
         LIMIT $5",
    )
    .bind(npc_id)
    .bind(now)
    .bind(tag)
    .bind(subject_id)
    .bind(limit)
    .bind(first_about)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let perspective = row.perspective.into_perspective();
            let teller = row.speaker_id.zip(row.teller_name.as_deref());
            let told = knowledge_line(npc_id, &row.content, row.hop_count, row.confidence, &perspective, teller);
            Fact {
                id: row.id,
                category: row.category,
                subject_id: row.subject_id,
                content: row.content,
                tags: row.tags,
                confidence: row.confidence,
                importance: row.importance,
                source: row.source,
                expires_at: row.expires_at,
                source_memory_id: row.source_memory_id,
                told,
            }
        })
        .collect())
}

#[derive(sqlx::FromRow)]
struct KnowledgeRow {
    id: Uuid,
    category: String,
    subject_id: Option<Uuid>,
    content: String,
    tags: Vec<String>,
    confidence: f64,
    importance: f64,
    source: String,
    expires_at: Option<DateTime<Utc>>,
    source_memory_id: Option<Uuid>,
    hop_count: i32,
    speaker_id: Option<Uuid>,
    teller_name: Option<String>,
    #[sqlx(flatten)]
    perspective: PerspectiveColumns,
}

/// An NPC's mood as the read side shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentMood {
    pub mood: String,
    pub intensity: f64,
    pub expires_at: Option<DateTime<Utc>>,
}

impl CurrentMood {
    /// Whether the mood still holds at `now` (a cache may keep it past its expiry).
    pub fn valid_at(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// The NPC's current mood and its intensity, unless it expired.
pub async fn mood(connection: &mut PgConnection, npc_id: Uuid, now: DateTime<Utc>) -> StoreResult<Option<CurrentMood>> {
    let row: Option<(Option<String>, f64, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT mood, mood_intensity, mood_expires_at FROM npc_profiles WHERE npc_id = $1")
            .bind(npc_id)
            .fetch_optional(connection)
            .await?;
    Ok(row.and_then(|(mood, intensity, expires_at)| {
        let mood = CurrentMood { mood: mood?, intensity, expires_at };
        mood.valid_at(now).then_some(mood)
    }))
}

/// The player's reputation with each of the NPC's factions (where there is one).
pub async fn faction_standing(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
) -> StoreResult<Vec<(String, f64)>> {
    let rows = sqlx::query_as(
        "SELECT f.faction, f.reputation FROM npc_factions n
         JOIN faction_reputation f ON f.faction = ANY(n.factions) AND f.player_id = $2
         WHERE n.npc_id = $1 ORDER BY f.faction",
    )
    .bind(npc_id)
    .bind(player_id)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

/// Adds `count` accesses at `at` to each memory (batched write-back of what went into
/// prompts).
pub async fn record_access(
    connection: &mut PgConnection,
    accesses: &[(Uuid, i32)],
    at: DateTime<Utc>,
) -> StoreResult<u64> {
    if accesses.is_empty() {
        return Ok(0);
    }
    let mut sorted = accesses.to_vec();
    sorted.sort_unstable();
    let (ids, counts): (Vec<Uuid>, Vec<i32>) = sorted.into_iter().unzip();
    let result = sqlx::query(
        "UPDATE memories AS m SET access_count = m.access_count + a.count, last_accessed = GREATEST(m.last_accessed, $3)
         FROM unnest($1::uuid[], $2::int4[]) AS a(id, count) WHERE m.id = a.id",
    )
    .bind(&ids)
    .bind(&counts)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(result.rows_affected())
}
