//! Player privacy: opt-out and right-to-be-forgotten state.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct PrivacyStatus {
    pub player_id: Uuid,
    pub allow_memory: bool,
    pub forgotten_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// Why a conversation must not be recorded, if it must not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    OptedOut,
    /// The conversation started before the player was forgotten: a late or redelivered
    /// copy must not bring the memories back.
    Forgotten,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::OptedOut => "opted_out",
            Refusal::Forgotten => "forgotten",
        }
    }
}

impl PrivacyStatus {
    pub fn refusal_for(&self, conversation_started_at: DateTime<Utc>) -> Option<Refusal> {
        if !self.allow_memory {
            return Some(Refusal::OptedOut);
        }
        match self.forgotten_at {
            Some(forgotten_at) if conversation_started_at < forgotten_at => Some(Refusal::Forgotten),
            _ => None,
        }
    }
}

/// Applies a `world.player_privacy` message; an older message than the one already
/// applied changes nothing, so redeliveries and reordering are harmless.
pub async fn set_allow_memory(
    connection: &mut PgConnection,
    player_id: Uuid,
    allow_memory: bool,
    at: DateTime<Utc>,
) -> StoreResult<bool> {
    let result = sqlx::query(
        "INSERT INTO player_privacy (player_id, allow_memory, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (player_id) DO UPDATE
             SET allow_memory = EXCLUDED.allow_memory, updated_at = EXCLUDED.updated_at,
                 recorded_at = now()
             WHERE player_privacy.updated_at <= EXCLUDED.updated_at",
    )
    .bind(player_id)
    .bind(allow_memory)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(result.rows_affected() > 0)
}

/// Marks the player forgotten as of `at` (used by `npcmem forget-player`).
pub async fn mark_forgotten(connection: &mut PgConnection, player_id: Uuid, at: DateTime<Utc>) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO player_privacy (player_id, allow_memory, forgotten_at, updated_at)
         VALUES ($1, true, $2, $2)
         ON CONFLICT (player_id) DO UPDATE SET forgotten_at = EXCLUDED.forgotten_at,
             recorded_at = now()",
    )
    .bind(player_id)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// Privacy rows for the given players; players without a row allow memory.
pub async fn statuses(connection: &mut PgConnection, player_ids: &[Uuid]) -> StoreResult<HashMap<Uuid, PrivacyStatus>> {
    if player_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query_as::<_, PrivacyStatus>(
        "SELECT player_id, allow_memory, forgotten_at, updated_at FROM player_privacy
         WHERE player_id = ANY($1)",
    )
    .bind(player_ids)
    .fetch_all(connection)
    .await?;
    Ok(rows.into_iter().map(|row| (row.player_id, row)).collect())
}

/// Rows `forget_player` removed (or blanked), per table, in the order they were handled.
pub type ForgetReport = Vec<(&'static str, u64)>;

/// The right to be forgotten: in one transaction, under the
/// player's exclusive lock (ingest holds it shared while it reads privacy), removes every
/// row about `player_id` — memories, working memory, relationships and their ledger,
/// knowledge about them (gossip copies included), the audit rows, faction reputation and
/// membership, queued outbox messages that name them — and keeps the ledger rows as
/// tombstones (state `forgotten`, transcript and name blanked) so a redelivered
/// conversation dedups instead of coming back. `player_privacy.forgotten_at = at` refuses
/// any conversation that started earlier. Returns the rows touched per table.
pub async fn forget_player(
    connection: &mut PgConnection,
    player_id: Uuid,
    at: DateTime<Utc>,
) -> StoreResult<ForgetReport> {
    crate::locks::lock_player_exclusive(connection, player_id).await?;
    mark_forgotten(connection, player_id, at).await?;
    let mut report = ForgetReport::new();
    let tombstones = sqlx::query(
        "UPDATE conversations SET state = 'forgotten', transcript = '[]', player_name = '', location = NULL,
                error = NULL, skip_reason = 'forgotten', message_count = 0, redactions = 0, updated_at = now()
         WHERE player_id = $1",
    )
    .bind(player_id)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    report.push(("conversations (kept as tombstones)", tombstones));
    // Fixed statements, one per table: each names its column explicitly.
    const DELETES: &[(&str, &str)] = &[
        ("working_memory", "DELETE FROM working_memory WHERE player_id = $1"),
        ("memories", "DELETE FROM memories WHERE player_id = $1"),
        ("conversation_embeddings", "DELETE FROM conversation_embeddings WHERE player_id = $1"),
        ("memory_audit", "DELETE FROM memory_audit WHERE player_id = $1"),
        ("relationships", "DELETE FROM relationships WHERE player_id = $1"),
        ("applied_conversations", "DELETE FROM applied_conversations WHERE player_id = $1"),
        ("faction_reputation", "DELETE FROM faction_reputation WHERE player_id = $1"),
        ("player_factions", "DELETE FROM player_factions WHERE player_id = $1"),
        ("knowledge_facts", "DELETE FROM knowledge_facts WHERE subject_id = $1"),
        // Events and signals not yet published that name the player (by id, as text).
        ("outbox", "DELETE FROM outbox WHERE position(convert_to($1::text, 'UTF8') IN payload) > 0"),
    ];
    // The admin log keeps what was done, not to whom: the player's id becomes "forgotten".
    const SCRUBS: &[(&str, &str)] = &[(
        "admin_actions (id scrubbed)",
        "UPDATE admin_actions SET details = replace(details::text, $1::text, 'forgotten')::jsonb
         WHERE strpos(details::text, $1::text) > 0",
    )];
    // Gossip copies are written without the player's lock: this waits for a tick's write
    // already running (so the delete below sees its rows) and holds off later ones until
    // the commit, after which their speakers no longer hold the player's facts to tell
    // (knowledge::insert_facts checks that).
    sqlx::query("LOCK TABLE knowledge_facts IN SHARE ROW EXCLUSIVE MODE").execute(&mut *connection).await?;
    for (table, statement) in DELETES.iter().chain(SCRUBS) {
        let removed = sqlx::query(*statement).bind(player_id).execute(&mut *connection).await?.rows_affected();
        report.push((table, removed));
    }
    Ok(report)
}

/// Under shared player locks (so a concurrent `forget_player` either finished before or
/// waits for the caller's transaction to end), when each forgotten player among
/// `player_ids` was forgotten. Consumers of derived events drop what a forgotten player's
/// conversations produced before `forgotten_at`: an event already on its way when the
/// player was forgotten must not bring them back.
pub async fn forgotten_players(
    connection: &mut PgConnection,
    player_ids: &[Uuid],
) -> StoreResult<HashMap<Uuid, DateTime<Utc>>> {
    let mut unique = player_ids.to_vec();
    unique.sort_unstable();
    unique.dedup();
    crate::locks::lock_players_shared(connection, &unique).await?;
    Ok(statuses(connection, &unique)
        .await?
        .into_values()
        .filter_map(|status| Some((status.player_id, status.forgotten_at?)))
        .collect())
}
