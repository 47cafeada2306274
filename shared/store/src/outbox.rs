//! The transactional outbox: derived messages are written in the same
//! transaction as the state change that caused them, and the relay publishes them.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::error::StoreResult;

/// The channel `outbox_notify()` signals after every insert statement.
pub const NOTIFY_CHANNEL: &str = "npcmem_outbox";

/// A message to publish once the surrounding transaction commits.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// Full NATS subject, prefix included.
    pub subject: String,
    /// `Nats-Msg-Id`: the message's natural key, or `None` to use the outbox row id.
    pub msg_id: Option<String>,
    pub payload: Vec<u8>,
    /// Extra NATS headers (e.g. `traceparent`).
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub subject: String,
    pub msg_id: Option<String>,
    pub payload: Vec<u8>,
    pub headers: sqlx::types::Json<BTreeMap<String, String>>,
}

impl OutboxRow {
    /// The dedup id JetStream sees: the natural key, else the row id.
    pub fn nats_msg_id(&self) -> String {
        self.msg_id.clone().unwrap_or_else(|| format!("outbox-{}", self.id))
    }
}

/// Writes the messages in one statement. Call inside the transaction of the change.
pub async fn enqueue(connection: &mut PgConnection, messages: &[OutboxMessage]) -> StoreResult<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let subjects: Vec<&str> = messages.iter().map(|m| m.subject.as_str()).collect();
    let msg_ids: Vec<Option<&str>> = messages.iter().map(|m| m.msg_id.as_deref()).collect();
    let payloads: Vec<&[u8]> = messages.iter().map(|m| m.payload.as_slice()).collect();
    let headers: Vec<String> =
        messages.iter().map(|m| serde_json::to_string(&m.headers).expect("string maps always serialise")).collect();
    sqlx::query(
        "INSERT INTO outbox (subject, msg_id, payload, headers)
         SELECT subject, msg_id, payload, headers::jsonb
         FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::text[])
              AS m(subject, msg_id, payload, headers)",
    )
    .bind(subjects)
    .bind(msg_ids)
    .bind(payloads)
    .bind(headers)
    .execute(connection)
    .await?;
    Ok(())
}

/// Locks up to `limit` of the oldest rows no other relay holds. The caller publishes them,
/// deletes the acknowledged ones with [`delete`] and commits; a crash or rollback in
/// between releases the rows for the next claim (at-least-once, JetStream dedups).
pub async fn claim(connection: &mut PgConnection, limit: i64) -> StoreResult<Vec<OutboxRow>> {
    let rows = sqlx::query_as::<_, OutboxRow>(
        "SELECT id, subject, msg_id, payload, headers FROM outbox
         ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

pub async fn delete(connection: &mut PgConnection, ids: &[i64]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM outbox WHERE id = ANY($1)").bind(ids).execute(connection).await?;
    Ok(())
}

/// Deletes queued messages by their `msg_id`, in the caller's transaction: for messages
/// queued earlier in it that turned out not to be true. `msg_id` has no index (the outbox
/// is short and this is rare), so the statement scans the outbox.
pub async fn withdraw(connection: &mut PgConnection, msg_ids: &[String]) -> StoreResult<()> {
    if msg_ids.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM outbox WHERE msg_id = ANY($1)").bind(msg_ids).execute(connection).await?;
    Ok(())
}

/// Rows waiting and the age of the oldest in seconds (0 when empty), for metrics.
pub async fn depth(connection: &mut PgConnection) -> StoreResult<(i64, f64)> {
    let (count, oldest_age): (i64, Option<f64>) =
        sqlx::query_as("SELECT count(*), EXTRACT(EPOCH FROM (now() - min(created_at)))::float8 FROM outbox")
            .fetch_one(connection)
            .await?;
    Ok((count, oldest_age.unwrap_or(0.0).max(0.0)))
}
