//! The verbatim episodic store (DESIGN §10): every redacted turn a pair exchanged, read
//! from the ledger's transcripts. Ingest already writes each transcript once; indexing it
//! where it lies costs the write path nothing (a separate turns table written in
//! ingest's batch made that batch 3.6× slower, docs/benchmarks.md). Forgotten and skipped
//! conversations keep no transcript, so they recall nothing; a player who opted out
//! recalls nothing either; the per-pair cap blanks the oldest transcripts.

use chrono::{DateTime, Utc};
use npcmem_core::recall::{Turn, turn_time};
use npcmem_core::wire::{Speaker, TranscriptMessage};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

type TranscriptRow = (Uuid, sqlx::types::Json<Vec<TranscriptMessage>>, DateTime<Utc>, DateTime<Utc>, String, String);

/// Which of a pair's turns to read.
#[derive(Debug, Clone, Default)]
pub struct TurnFilter {
    /// Said at or after.
    pub from: Option<DateTime<Utc>>,
    /// Said at or before.
    pub to: Option<DateTime<Utc>>,
    pub speaker: Option<Speaker>,
}

/// The pair's turns, oldest first: the newest conversations whose turns add up to at
/// most `max_turns` (a conversation that would cross the cap is left out whole), narrowed
/// by `filter`.
pub async fn pair_turns(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
    max_turns: i64,
    filter: &TurnFilter,
) -> StoreResult<Vec<Turn>> {
    let rows: Vec<TranscriptRow> = sqlx::query_as(
        "SELECT conversation_id, transcript, started_at, ended_at, player_name, npc_name FROM (
             SELECT conversation_id, transcript, started_at, ended_at, player_name, npc_name,
                    sum(message_count) OVER (ORDER BY ended_at DESC, conversation_id DESC) AS through
             FROM conversations
             WHERE npc_id = $1 AND player_id = $2 AND transcript <> '[]'::jsonb
               AND NOT EXISTS (SELECT 1 FROM player_privacy p WHERE p.player_id = $2 AND NOT p.allow_memory)
         ) AS newest
         WHERE through <= $3 AND ($4::timestamptz IS NULL OR ended_at >= $4)
           AND ($5::timestamptz IS NULL OR started_at <= $5)
         ORDER BY ended_at, conversation_id",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(max_turns)
    .bind(filter.from)
    .bind(filter.to)
    .fetch_all(connection)
    .await?;
    let mut turns = Vec::new();
    for (conversation_id, sqlx::types::Json(messages), started_at, ended_at, player_name, npc_name) in rows {
        let count = messages.len();
        for (index, message) in messages.into_iter().enumerate() {
            let said_at = turn_time(started_at, ended_at, index, count);
            let in_range = filter.from.is_none_or(|from| said_at >= from) && filter.to.is_none_or(|to| said_at <= to);
            if !in_range || filter.speaker.is_some_and(|speaker| speaker != message.speaker) {
                continue;
            }
            let speaker_name = match message.speaker {
                Speaker::Player => &player_name,
                Speaker::Npc => &npc_name,
            };
            turns.push(Turn {
                conversation_id,
                turn: index as u32,
                speaker: message.speaker,
                speaker_name: Some(speaker_name.clone()).filter(|name| !name.is_empty()),
                text: message.text,
                said_at,
            });
        }
    }
    Ok(turns)
}

/// The per-pair cap (DESIGN §10): blanks the transcripts of each pair's oldest
/// conversations beyond `max_turns` turns in all (the ledger row stays, so dedup holds).
/// Returns the conversations evicted.
pub async fn evict_beyond_cap(connection: &mut PgConnection, max_turns: i64) -> StoreResult<u64> {
    let evicted = sqlx::query(
        "UPDATE conversations AS c SET transcript = '[]'::jsonb, updated_at = now()
         FROM (SELECT conversation_id,
                      sum(message_count) OVER (PARTITION BY npc_id, player_id
                                               ORDER BY ended_at DESC, conversation_id DESC) AS through
               FROM conversations WHERE transcript <> '[]'::jsonb) AS ranked
         WHERE c.conversation_id = ranked.conversation_id AND ranked.through > $1",
    )
    .bind(max_turns)
    .execute(connection)
    .await?;
    Ok(evicted.rows_affected())
}
