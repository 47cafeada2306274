//! Player privacy (seed open question 2): opt-out and right-to-be-forgotten state.

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
