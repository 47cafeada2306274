//! Seed §Working Memory Buffer: the last conversation summaries per pair, persisted so a
//! restart or a second replica sees them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// The seed's `WorkingMemoryBuffer.MAX_CONVERSATIONS`.
pub const MAX_CONVERSATIONS_PER_PAIR: i64 = 3;

#[derive(Debug, Clone, Serialize)]
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
pub async fn record_batch(connection: &mut PgConnection, summaries: &[NewSummary]) -> StoreResult<()> {
    if summaries.is_empty() {
        return Ok(());
    }
    let document = serde_json::to_value(summaries).expect("summaries always serialise to JSON");
    sqlx::query(
        "INSERT INTO working_memory (conversation_id, npc_id, player_id, summary, ended_at)
         SELECT conversation_id, npc_id, player_id, summary, ended_at
         FROM jsonb_to_recordset($1) AS r(conversation_id uuid, npc_id uuid, player_id uuid,
             summary text, ended_at timestamptz)
         ON CONFLICT (conversation_id) DO NOTHING",
    )
    .bind(&document)
    .execute(&mut *connection)
    .await?;
    sqlx::query(
        "DELETE FROM working_memory AS w
         USING (
             SELECT conversation_id,
                    row_number() OVER (PARTITION BY npc_id, player_id
                                       ORDER BY ended_at DESC, conversation_id DESC) AS rank
             FROM working_memory
             WHERE (npc_id, player_id) IN (
                 SELECT DISTINCT npc_id, player_id
                 FROM jsonb_to_recordset($1) AS r(npc_id uuid, player_id uuid))
         ) AS ranked
         WHERE w.conversation_id = ranked.conversation_id AND ranked.rank > $2",
    )
    .bind(&document)
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
