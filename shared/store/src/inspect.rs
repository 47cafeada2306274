//! What an operator sees of one NPC or one NPC–player pair (`npcmem inspect`): every
//! memory (suspect ones included, unlike the prompt read side in [`crate::context`]),
//! relationships, working memory and knowledge, with the columns that explain them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct MemoryView {
    pub id: Uuid,
    pub player_id: Option<Uuid>,
    pub memory_type: String,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub confidence: f64,
    pub salience: f64,
    pub emotional_valence: String,
    pub emotional_intensity: f64,
    pub locked: bool,
    pub safety_flag: String,
    pub extractor: Option<String>,
    pub source_conversation_id: Option<Uuid>,
    pub reinforcement_count: i32,
    pub access_count: i32,
    pub created_at: DateTime<Utc>,
    pub last_accessed: DateTime<Utc>,
}

/// The NPC's memories (of one player when given), most salient first.
pub async fn memories(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<MemoryView>> {
    let rows = sqlx::query_as(
        "SELECT id, player_id, memory_type, content, tags, importance, confidence, salience, emotional_valence,
             emotional_intensity, locked, safety_flag, extractor, source_conversation_id, reinforcement_count,
             access_count, created_at, last_accessed
         FROM memories WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2)
         ORDER BY salience DESC, created_at DESC, id LIMIT $3",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct RelationshipView {
    pub player_id: Uuid,
    pub stage: String,
    pub disposition: f64,
    pub trust: f64,
    pub fear: f64,
    pub respect: f64,
    pub loyalty: f64,
    pub friendliness: f64,
    pub romantic_interest: f64,
    pub interaction_count: i32,
    pub memory_count: i32,
    pub first_interaction: Option<DateTime<Utc>>,
    pub last_interaction: Option<DateTime<Utc>>,
    pub version: i64,
}

/// The NPC's relationships (with one player when given), most recent interaction first.
pub async fn relationships(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<RelationshipView>> {
    let rows = sqlx::query_as(
        "SELECT player_id, stage, disposition, trust, fear, respect, loyalty, friendliness, romantic_interest,
             interaction_count, memory_count, first_interaction, last_interaction, version
         FROM relationships WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2)
         ORDER BY last_interaction DESC NULLS LAST, player_id LIMIT $3",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct WorkingMemoryView {
    pub conversation_id: Uuid,
    pub player_id: Uuid,
    pub summary: String,
    pub ended_at: DateTime<Utc>,
}

/// The working-memory summaries, newest first.
pub async fn working_memory(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<WorkingMemoryView>> {
    let rows = sqlx::query_as(
        "SELECT conversation_id, player_id, summary, ended_at FROM working_memory
         WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2)
         ORDER BY ended_at DESC, conversation_id LIMIT $3",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct FactView {
    pub id: Uuid,
    pub category: String,
    pub subject_id: Option<Uuid>,
    pub content: String,
    pub tags: Vec<String>,
    pub confidence: f64,
    pub importance: f64,
    pub source: String,
    pub hop_count: i32,
    pub speaker_id: Option<Uuid>,
    pub superseded_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What the NPC knows (about `subject_id` when given), expired and superseded facts
/// included, most important first.
pub async fn knowledge(
    connection: &mut PgConnection,
    npc_id: Uuid,
    subject_id: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<FactView>> {
    let rows = sqlx::query_as(
        "SELECT id, category, subject_id, content, tags, confidence, importance, source, hop_count, speaker_id,
             superseded_by, created_at, expires_at
         FROM knowledge_facts WHERE npc_id = $1 AND ($2::uuid IS NULL OR subject_id = $2)
         ORDER BY importance DESC, confidence DESC, created_at DESC, id LIMIT $3",
    )
    .bind(npc_id)
    .bind(subject_id)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

/// How many memories the NPC holds (of one player when given).
pub async fn count_memories(connection: &mut PgConnection, npc_id: Uuid, player_id: Option<Uuid>) -> StoreResult<i64> {
    let count =
        sqlx::query_scalar("SELECT count(*) FROM memories WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2)")
            .bind(npc_id)
            .bind(player_id)
            .fetch_one(connection)
            .await?;
    Ok(count)
}
