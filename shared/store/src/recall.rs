//! The verbatim episodic store: every redacted turn a pair exchanged, read
//! from the ledger's transcripts. Ingest already writes each transcript once; indexing it
//! where it lies costs the write path nothing (a separate turns table written in
//! ingest's batch made that batch 3.6× slower, docs/benchmarks.md). Forgotten and skipped
//! conversations keep no transcript, so they recall nothing; a player who opted out
//! recalls nothing either; the per-pair cap blanks the oldest transcripts.

use std::collections::HashMap;

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

/// The per-pair cap: blanks the transcripts of each pair's oldest
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
    .execute(&mut *connection)
    .await?;
    // Vectors of a blanked transcript would outlive the words they were made from.
    sqlx::query(
        "DELETE FROM conversation_embeddings AS e USING conversations AS c
         WHERE c.conversation_id = e.conversation_id AND c.transcript = '[]'::jsonb",
    )
    .execute(connection)
    .await?;
    Ok(evicted.rows_affected())
}

/// A conversation whose turns still need vectors of some model.
#[derive(Debug, Clone)]
pub struct Unembedded {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub texts: Vec<String>,
}

type UnembeddedRow = (Uuid, Uuid, Uuid, sqlx::types::Json<Vec<TranscriptMessage>>);

fn unembedded_rows(rows: Vec<UnembeddedRow>) -> Vec<Unembedded> {
    rows.into_iter()
        .map(|(conversation_id, npc_id, player_id, sqlx::types::Json(messages))| Unembedded {
            conversation_id,
            npc_id,
            player_id,
            texts: messages.into_iter().map(|message| message.text).collect(),
        })
        .collect()
}

/// Of `conversation_ids`, those with a transcript and no vectors of `model`.
pub async fn unembedded_of(
    connection: &mut PgConnection,
    model: &str,
    conversation_ids: &[Uuid],
) -> StoreResult<Vec<Unembedded>> {
    let rows: Vec<UnembeddedRow> = sqlx::query_as(
        "SELECT c.conversation_id, c.npc_id, c.player_id, c.transcript FROM conversations c
         WHERE c.conversation_id = ANY($1) AND c.transcript <> '[]'::jsonb
           AND NOT EXISTS (SELECT 1 FROM conversation_embeddings e
                           WHERE e.conversation_id = c.conversation_id AND e.model = $2)
         ORDER BY c.conversation_id",
    )
    .bind(conversation_ids)
    .bind(model)
    .fetch_all(connection)
    .await?;
    Ok(unembedded_rows(rows))
}

/// The next `limit` conversations after `after` (in id order) with a transcript and no
/// vectors of `model`: the backfill's pages.
pub async fn unembedded_after(
    connection: &mut PgConnection,
    model: &str,
    after: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Unembedded>> {
    let rows: Vec<UnembeddedRow> = sqlx::query_as(
        "SELECT c.conversation_id, c.npc_id, c.player_id, c.transcript FROM conversations c
         WHERE ($2::uuid IS NULL OR c.conversation_id > $2) AND c.transcript <> '[]'::jsonb
           AND NOT EXISTS (SELECT 1 FROM conversation_embeddings e
                           WHERE e.conversation_id = c.conversation_id AND e.model = $1)
         ORDER BY c.conversation_id
         LIMIT $3",
    )
    .bind(model)
    .bind(after)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(unembedded_rows(rows))
}

/// How many conversations have a transcript and no vectors of `model` (the backfill's total).
pub async fn count_unembedded(connection: &mut PgConnection, model: &str) -> StoreResult<i64> {
    let (count,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM conversations c WHERE c.transcript <> '[]'::jsonb
           AND NOT EXISTS (SELECT 1 FROM conversation_embeddings e
                           WHERE e.conversation_id = c.conversation_id AND e.model = $1)",
    )
    .bind(model)
    .fetch_one(connection)
    .await?;
    Ok(count)
}

/// One conversation's vectors, turn by turn.
#[derive(Debug, Clone)]
pub struct ConversationVectors {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub vectors: Vec<Vec<f32>>,
}

/// Stores vectors of `model`; idempotent (a conversation already embedded keeps its
/// row). A conversation blanked since it was read, or whose vectors do not match its
/// transcript's length, stores nothing. Returns the rows written.
pub async fn save_vectors(
    connection: &mut PgConnection,
    model: &str,
    conversations: &[ConversationVectors],
) -> StoreResult<u64> {
    let mut ids = Vec::new();
    let mut npcs = Vec::new();
    let mut players = Vec::new();
    let mut dims = Vec::new();
    let mut turns = Vec::new();
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    for conversation in conversations {
        let Some(width) = conversation.vectors.first().map(Vec::len).filter(|&width| width > 0) else {
            continue;
        };
        if conversation.vectors.iter().any(|vector| vector.len() != width) {
            continue;
        }
        ids.push(conversation.conversation_id);
        npcs.push(conversation.npc_id);
        players.push(conversation.player_id);
        dims.push(width as i32);
        turns.push(conversation.vectors.len() as i32);
        blobs.push(conversation.vectors.iter().flatten().flat_map(|x| x.to_le_bytes()).collect());
    }
    let written = sqlx::query(
        "INSERT INTO conversation_embeddings (conversation_id, model, npc_id, player_id, dims, turns, vectors)
         SELECT n.conversation_id, $1, n.npc_id, n.player_id, n.dims, n.turns, n.vectors
         FROM unnest($2::uuid[], $3::uuid[], $4::uuid[], $5::int4[], $6::int4[], $7::bytea[])
              AS n (conversation_id, npc_id, player_id, dims, turns, vectors)
         JOIN conversations c ON c.conversation_id = n.conversation_id
         WHERE c.transcript <> '[]'::jsonb AND jsonb_array_length(c.transcript) = n.turns
         ON CONFLICT (conversation_id, model) DO NOTHING",
    )
    .bind(model)
    .bind(&ids)
    .bind(&npcs)
    .bind(&players)
    .bind(&dims)
    .bind(&turns)
    .bind(&blobs)
    .execute(connection)
    .await?;
    Ok(written.rows_affected())
}

/// The vectors of `model` for `conversation_ids`, keyed by conversation: `turns` vectors
/// of `dims` each, flattened.
pub async fn conversation_vectors(
    connection: &mut PgConnection,
    model: &str,
    conversation_ids: &[Uuid],
) -> StoreResult<HashMap<Uuid, (usize, Vec<f32>)>> {
    let rows: Vec<(Uuid, i32, Vec<u8>)> = sqlx::query_as(
        "SELECT conversation_id, dims, vectors FROM conversation_embeddings
         WHERE conversation_id = ANY($1) AND model = $2",
    )
    .bind(conversation_ids)
    .bind(model)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(conversation_id, dims, bytes)| {
            let values =
                bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
            (conversation_id, (dims as usize, values.collect()))
        })
        .collect())
}
