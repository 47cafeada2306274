//! The original design (Working Memory Buffer): the last conversation summaries per pair, persisted so a
//! restart or a second replica sees them.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// The original design's `WorkingMemoryBuffer.MAX_CONVERSATIONS`.
pub const MAX_CONVERSATIONS_PER_PAIR: i64 = 3;

#[derive(Debug, Clone)]
pub struct NewSummary {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub summary: String,
    pub ended_at: DateTime<Utc>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SummaryRow {
    pub conversation_id: Uuid,
    pub summary: String,
    pub ended_at: DateTime<Utc>,
}

/// Records the summaries, then trims every touched pair back to its newest
/// `MAX_CONVERSATIONS_PER_PAIR` by `ended_at` (a late, older conversation is dropped).
/// The caller must hold the pairs' locks ([`crate::locks::lock_pairs`] with `PairScope::WorkingMemory`): two transactions
/// trimming one pair at once would each keep their own newest three.
pub async fn record_batch(connection: &mut PgConnection, summaries: &[NewSummary]) -> StoreResult<()> {
    if summaries.is_empty() {
        return Ok(());
    }
    let conversation_ids: Vec<Uuid> = summaries.iter().map(|s| s.conversation_id).collect();
    let npc_ids: Vec<Uuid> = summaries.iter().map(|s| s.npc_id).collect();
    let player_ids: Vec<Uuid> = summaries.iter().map(|s| s.player_id).collect();
    let texts: Vec<&str> = summaries.iter().map(|s| s.summary.as_str()).collect();
    let ended: Vec<DateTime<Utc>> = summaries.iter().map(|s| s.ended_at).collect();
    sqlx::query(
        "INSERT INTO working_memory (conversation_id, npc_id, player_id, summary, ended_at)
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::timestamptz[])
         ON CONFLICT (conversation_id) DO NOTHING",
    )
    .bind(&conversation_ids)
    .bind(&npc_ids)
    .bind(&player_ids)
    .bind(&texts)
    .bind(&ended)
    .execute(&mut *connection)
    .await?;
    sqlx::query(
        "DELETE FROM working_memory
         WHERE conversation_id IN (
             SELECT older.conversation_id
             FROM (SELECT DISTINCT npc_id, player_id FROM UNNEST($1::uuid[], $2::uuid[]) AS p(npc_id, player_id)) AS pair
             CROSS JOIN LATERAL (
                 SELECT conversation_id FROM working_memory AS w
                 WHERE w.npc_id = pair.npc_id AND w.player_id = pair.player_id
                 ORDER BY w.ended_at DESC, w.conversation_id DESC
                 OFFSET $3) AS older)",
    )
    .bind(&npc_ids)
    .bind(&player_ids)
    .bind(MAX_CONVERSATIONS_PER_PAIR)
    .execute(connection)
    .await?;
    Ok(())
}

/// The pair's summaries, newest first.
pub async fn recent(connection: &mut PgConnection, npc_id: Uuid, player_id: Uuid) -> StoreResult<Vec<SummaryRow>> {
    let rows = sqlx::query_as::<_, SummaryRow>(
        "SELECT conversation_id, summary, ended_at FROM working_memory
         WHERE npc_id = $1 AND player_id = $2 ORDER BY ended_at DESC, conversation_id DESC",
    )
    .bind(npc_id)
    .bind(player_id)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}
