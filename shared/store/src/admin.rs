//! Changes operators make through the `npcmem` CLI, and the
//! `admin_actions` log that records who made each one (migration 0010). Callers write the
//! change and its log row in one transaction, so a change is never left unrecorded.

use chrono::{DateTime, Utc};
use npcmem_core::memory::{MemoryType, SafetyFlag};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// `memories.extractor` of memories an operator injected.
pub const ADMIN_EXTRACTOR: &str = "admin";

/// One row of `admin_actions`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AdminAction {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub details: serde_json::Value,
    pub at: DateTime<Utc>,
}

/// Appends one action to the log; returns its id.
pub async fn record_action(
    connection: &mut PgConnection,
    actor: &str,
    action: &str,
    details: &serde_json::Value,
) -> StoreResult<i64> {
    let id = sqlx::query_scalar("INSERT INTO admin_actions (actor, action, details) VALUES ($1, $2, $3) RETURNING id")
        .bind(actor)
        .bind(action)
        .bind(details)
        .fetch_one(connection)
        .await?;
    Ok(id)
}

/// The newest `limit` actions, newest first; `action` narrows to one action name.
pub async fn recent_actions(
    connection: &mut PgConnection,
    action: Option<&str>,
    limit: i64,
) -> StoreResult<Vec<AdminAction>> {
    let rows = sqlx::query_as(
        "SELECT id, actor, action, details, at FROM admin_actions
         WHERE ($1::text IS NULL OR action = $1) ORDER BY id DESC LIMIT $2",
    )
    .bind(action)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

/// A memory an operator writes by hand (`npcmem inject`). Admin memories may reach
/// importance 1.0 and are locked unless the operator says otherwise (seed
/// §Memory Growth Bounds: memories made by admin commands set locked).
#[derive(Debug, Clone)]
pub struct AdminMemory {
    pub id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub memory_type: MemoryType,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub salience: f64,
    pub locked: bool,
    pub safety_flag: SafetyFlag,
    pub created_at: DateTime<Utc>,
}

/// Inserts the memory with confidence 1.0 and extractor `admin`. The caller holds the
/// pair's memory lock and enforces the cap afterwards, as extract does.
pub async fn insert_memory(connection: &mut PgConnection, memory: &AdminMemory) -> StoreResult<()> {
    debug_assert!((0.0..=1.0).contains(&memory.importance), "importance is validated by the caller");
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
             locked, safety_flag, extractor, created_at, last_accessed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 1.0, $8, $9, $10, $11, $12, $12)",
    )
    .bind(memory.id)
    .bind(memory.npc_id)
    .bind(memory.player_id)
    .bind(memory.memory_type.as_str())
    .bind(&memory.content)
    .bind(&memory.tags)
    .bind(memory.importance)
    .bind(memory.salience)
    .bind(memory.locked)
    .bind(memory.safety_flag.as_str())
    .bind(ADMIN_EXTRACTOR)
    .bind(memory.created_at)
    .execute(connection)
    .await?;
    Ok(())
}

/// What `clear_memories` removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cleared {
    pub memories: u64,
    pub working_memory: u64,
    /// Locked memories left in place because the caller asked to keep them.
    pub locked_kept: u64,
}

/// Deletes the memories and working-memory summaries of one pair (`player_id` given) or
/// of every pair of the NPC. Locked memories go too unless `keep_locked`. The audit trail
/// (`memory_audit`) and relationships stay: clearing forgets what happened, not that it
/// was flagged, and not how the NPC feels.
pub async fn clear_memories(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Option<Uuid>,
    keep_locked: bool,
) -> StoreResult<Cleared> {
    let memories = sqlx::query(
        "DELETE FROM memories WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2) AND (NOT $3 OR NOT locked)",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(keep_locked)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    let locked_kept: i64 = if keep_locked {
        sqlx::query_scalar(
            "SELECT count(*) FROM memories WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2) AND locked",
        )
        .bind(npc_id)
        .bind(player_id)
        .fetch_one(&mut *connection)
        .await?
    } else {
        0
    };
    let working_memory =
        sqlx::query("DELETE FROM working_memory WHERE npc_id = $1 AND ($2::uuid IS NULL OR player_id = $2)")
            .bind(npc_id)
            .bind(player_id)
            .execute(&mut *connection)
            .await?
            .rows_affected();
    Ok(Cleared { memories, working_memory, locked_kept: u64::try_from(locked_kept).unwrap_or(0) })
}

/// A memory whose lock an operator set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LockChange {
    pub memory_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Option<Uuid>,
    pub was_locked: bool,
    pub locked: bool,
}

/// Sets `memories.locked`; None when no memory has that id. Locked memories never decay
/// and are never evicted.
pub async fn set_locked(
    connection: &mut PgConnection,
    memory_id: Uuid,
    locked: bool,
) -> StoreResult<Option<LockChange>> {
    let row: Option<(Uuid, Option<Uuid>, bool)> = sqlx::query_as(
        "UPDATE memories AS m SET locked = $2
         FROM (SELECT id, locked AS was_locked FROM memories WHERE id = $1 FOR UPDATE) AS before
         WHERE m.id = before.id
         RETURNING m.npc_id, m.player_id, before.was_locked",
    )
    .bind(memory_id)
    .bind(locked)
    .fetch_optional(connection)
    .await?;
    Ok(row.map(|(npc_id, player_id, was_locked)| LockChange { memory_id, npc_id, player_id, was_locked, locked }))
}
