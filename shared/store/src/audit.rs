//! The flagged-memory audit trail for operators: listing
//! flagged memories with their reasons and marking them reviewed. Extract writes the rows
//! ([`crate::memories::record_audit`]).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// One `memory_audit` row, and whether its memory still exists (decay, `clear` or a
/// consolidation may have removed it since).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub memory_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Option<Uuid>,
    pub conversation_id: Option<Uuid>,
    pub content: String,
    pub reasons: Vec<String>,
    pub safety_flag: String,
    pub original_importance: f64,
    pub flagged_at: DateTime<Utc>,
    pub reviewed_at: Option<DateTime<Utc>>,
    pub reviewed_by: Option<String>,
    pub memory_exists: bool,
}

const COLUMNS: &str = "a.id, a.memory_id, a.npc_id, a.player_id, a.conversation_id, a.content, a.reasons,
    a.safety_flag, a.original_importance, a.flagged_at, a.reviewed_at, a.reviewed_by,
    EXISTS (SELECT 1 FROM memories m WHERE m.id = a.memory_id) AS memory_exists";

/// Flagged memories, oldest first; only unreviewed ones unless `include_reviewed`.
pub async fn entries(connection: &mut PgConnection, include_reviewed: bool, limit: i64) -> StoreResult<Vec<AuditRow>> {
    let statement = format!(
        "SELECT {COLUMNS} FROM memory_audit a WHERE $1 OR a.reviewed_at IS NULL ORDER BY a.flagged_at, a.id LIMIT $2"
    );
    let rows =
        sqlx::query_as(sqlx::AssertSqlSafe(statement)).bind(include_reviewed).bind(limit).fetch_all(connection).await?;
    Ok(rows)
}

pub async fn get(connection: &mut PgConnection, id: i64) -> StoreResult<Option<AuditRow>> {
    let statement = format!("SELECT {COLUMNS} FROM memory_audit a WHERE a.id = $1");
    let row = sqlx::query_as(sqlx::AssertSqlSafe(statement)).bind(id).fetch_optional(connection).await?;
    Ok(row)
}

/// What marking an audit entry reviewed did.
#[derive(Debug, Clone, PartialEq)]
pub enum Review {
    Marked(AuditRow),
    /// Someone reviewed it before; nothing changed.
    AlreadyReviewed(AuditRow),
    NotFound,
}

/// Marks entry `id` reviewed by `reviewer` at `at`, unless it already was.
pub async fn mark_reviewed(
    connection: &mut PgConnection,
    id: i64,
    reviewer: &str,
    at: DateTime<Utc>,
) -> StoreResult<Review> {
    let marked =
        sqlx::query("UPDATE memory_audit SET reviewed_at = $3, reviewed_by = $2 WHERE id = $1 AND reviewed_at IS NULL")
            .bind(id)
            .bind(reviewer)
            .bind(at)
            .execute(&mut *connection)
            .await?
            .rows_affected()
            == 1;
    let Some(row) = get(connection, id).await? else {
        return Ok(Review::NotFound);
    };
    Ok(if marked { Review::Marked(row) } else { Review::AlreadyReviewed(row) })
}
