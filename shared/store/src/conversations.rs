//! The conversation ledger: dedup by conversation_id and the extraction job state machine.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// Ledger states. `skipped` rows record that a conversation arrived for a
/// player who opted out or was forgotten; they keep no transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConversationState {
    Pending,
    Extracting,
    Storing,
    Complete,
    Failed,
    Skipped,
    Forgotten,
}

impl ConversationState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConversationState::Pending => "pending",
            ConversationState::Extracting => "extracting",
            ConversationState::Storing => "storing",
            ConversationState::Complete => "complete",
            ConversationState::Failed => "failed",
            ConversationState::Skipped => "skipped",
            ConversationState::Forgotten => "forgotten",
        }
    }
}

/// One ledger row as ingest writes it. Serialised into the JSON document that
/// `insert_batch` unpacks with `jsonb_to_recordset`, so a whole batch is one statement.
#[derive(Debug, Clone, Serialize)]
pub struct NewConversation {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub npc_name: String,
    pub npc_role: Option<String>,
    pub player_name: String,
    pub npc_factions: Vec<String>,
    pub player_factions: Vec<String>,
    pub location: Option<String>,
    pub transcript: serde_json::Value,
    pub message_count: i32,
    pub redactions: i32,
    pub state: ConversationState,
    pub skip_reason: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

/// Inserts the rows that are new and returns the ids of exactly those; a conversation
/// already in the ledger is left untouched (the dedup).
pub async fn insert_batch(connection: &mut PgConnection, rows: &[NewConversation]) -> StoreResult<Vec<Uuid>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // Json(..) streams the rows into the parameter; no intermediate JSON tree.
    let document = sqlx::types::Json(rows);
    let inserted: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO conversations (conversation_id, npc_id, player_id, npc_name, npc_role,
             player_name, npc_factions, player_factions, location, transcript, message_count,
             redactions, state, skip_reason, started_at, ended_at)
         SELECT conversation_id, npc_id, player_id, npc_name, npc_role, player_name,
             npc_factions, player_factions, location, transcript, message_count, redactions,
             state, skip_reason, started_at, ended_at
         FROM jsonb_to_recordset($1) AS r(conversation_id uuid, npc_id uuid, player_id uuid,
             npc_name text, npc_role text, player_name text, npc_factions text[],
             player_factions text[], location text, transcript jsonb, message_count integer,
             redactions integer, state text, skip_reason text, started_at timestamptz,
             ended_at timestamptz)
         ON CONFLICT (conversation_id) DO NOTHING
         RETURNING conversation_id",
    )
    .bind(document)
    .fetch_all(connection)
    .await?;
    Ok(inserted)
}

/// A ledger row as operators and tests read it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConversationRow {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub npc_name: String,
    pub npc_role: Option<String>,
    pub player_name: String,
    pub npc_factions: Vec<String>,
    pub player_factions: Vec<String>,
    pub location: Option<String>,
    pub transcript: serde_json::Value,
    pub message_count: i32,
    pub redactions: i32,
    pub state: String,
    pub skip_reason: Option<String>,
    pub attempts: i32,
    pub error: Option<String>,
    pub extractor: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
}

pub async fn get(connection: &mut PgConnection, conversation_id: Uuid) -> StoreResult<Option<ConversationRow>> {
    let row = sqlx::query_as::<_, ConversationRow>(
        "SELECT conversation_id, npc_id, player_id, npc_name, npc_role, player_name,
             npc_factions, player_factions, location, transcript, message_count, redactions,
             state, skip_reason, attempts, error, extractor, started_at, ended_at, received_at
         FROM conversations WHERE conversation_id = $1",
    )
    .bind(conversation_id)
    .fetch_optional(connection)
    .await?;
    Ok(row)
}

/// Count of ledger rows per state, for `npcmem stats` and metrics.
pub async fn count_by_state(connection: &mut PgConnection) -> StoreResult<Vec<(String, i64)>> {
    let rows =
        sqlx::query_as::<_, (String, i64)>("SELECT state, count(*) FROM conversations GROUP BY state ORDER BY state")
            .fetch_all(connection)
            .await?;
    Ok(rows)
}

/// Attempts after which a conversation's extraction is given up (seed
/// `MemoryExtractionJob.max_attempts`).
pub const MAX_EXTRACTION_ATTEMPTS: i32 = 3;

/// What an extract worker owns after claiming a conversation: the row and its attempt
/// number, which fences a slower, older attempt out of completing it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedConversation {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub npc_name: String,
    pub npc_role: Option<String>,
    pub player_name: String,
    pub npc_factions: Vec<String>,
    pub player_factions: Vec<String>,
    pub location: Option<String>,
    pub transcript: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub attempts: i32,
}

/// Moves the given conversations to `extracting` and returns the claimed rows. A row is
/// claimable while pending, failed, or extracting (a crashed or slow attempt: the new
/// attempt number supersedes it) and under `MAX_EXTRACTION_ATTEMPTS`; complete, skipped
/// and forgotten rows are never returned, so a redelivered job does nothing.
pub async fn claim_for_extraction(
    connection: &mut PgConnection,
    conversation_ids: &[Uuid],
) -> StoreResult<Vec<ClaimedConversation>> {
    let rows = sqlx::query_as::<_, ClaimedConversation>(
        "UPDATE conversations SET state = 'extracting', attempts = attempts + 1, updated_at = now()
         WHERE conversation_id = ANY($1) AND state IN ('pending', 'extracting', 'failed') AND attempts < $2
         RETURNING conversation_id, npc_id, player_id, npc_name, npc_role, player_name, npc_factions,
                   player_factions, location, transcript, started_at, ended_at, attempts",
    )
    .bind(conversation_ids)
    .bind(MAX_EXTRACTION_ATTEMPTS)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

/// Marks `failed` those of `conversation_ids` that used up their attempts without
/// completing (each attempt crashed or could not store); returns them, so their jobs go
/// to the dead-letter stream instead of being acknowledged as if done.
pub async fn fail_exhausted(connection: &mut PgConnection, conversation_ids: &[Uuid]) -> StoreResult<Vec<Uuid>> {
    if conversation_ids.is_empty() {
        return Ok(Vec::new());
    }
    let failed = sqlx::query_scalar(
        "UPDATE conversations
         SET state = 'failed', updated_at = now(),
             error = format('extraction gave up after %s attempts', attempts)
         WHERE conversation_id = ANY($1) AND state IN ('pending', 'extracting') AND attempts >= $2
         RETURNING conversation_id",
    )
    .bind(conversation_ids)
    .bind(MAX_EXTRACTION_ATTEMPTS)
    .fetch_all(connection)
    .await?;
    Ok(failed)
}

/// Marks claimed conversations complete, but only those still held by the given attempt;
/// returns the ids actually completed (the caller writes memories for exactly those).
pub async fn complete_extraction(
    connection: &mut PgConnection,
    claims: &[(Uuid, i32, &str)],
) -> StoreResult<Vec<Uuid>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = claims.iter().map(|(id, _, _)| *id).collect();
    let attempts: Vec<i32> = claims.iter().map(|(_, attempt, _)| *attempt).collect();
    let extractors: Vec<&str> = claims.iter().map(|(_, _, extractor)| *extractor).collect();
    let completed = sqlx::query_scalar(
        "UPDATE conversations AS c SET state = 'complete', extractor = j.extractor, error = NULL,
             updated_at = now()
         FROM UNNEST($1::uuid[], $2::int4[], $3::text[]) AS j(conversation_id, attempt, extractor)
         WHERE c.conversation_id = j.conversation_id AND c.state = 'extracting' AND c.attempts = j.attempt
         RETURNING c.conversation_id",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(&extractors)
    .fetch_all(connection)
    .await?;
    Ok(completed)
}
