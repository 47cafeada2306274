//! Faction membership as game servers report it (latest timestamp wins).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

#[derive(Debug, Clone, Serialize)]
pub struct FactionMembership {
    pub id: Uuid,
    pub factions: Vec<String>,
    pub as_of: DateTime<Utc>,
}

/// Which side of a conversation a membership belongs to; picks the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Player,
    Npc,
}

/// Upserts memberships, keeping for each id the one with the newest `as_of`. The input
/// may hold one id several times; only its newest entry is written (Postgres refuses to
/// update one row twice in a statement).
pub async fn record_batch(
    connection: &mut PgConnection,
    side: Side,
    memberships: &[FactionMembership],
) -> StoreResult<()> {
    let newest = newest_per_id(memberships);
    if newest.is_empty() {
        return Ok(());
    }
    let document = sqlx::types::Json(&newest);
    let statement = match side {
        Side::Player => {
            "INSERT INTO player_factions (player_id, factions, as_of)
             SELECT id, factions, as_of
             FROM jsonb_to_recordset($1) AS r(id uuid, factions text[], as_of timestamptz)
             ON CONFLICT (player_id) DO UPDATE
                 SET factions = EXCLUDED.factions, as_of = EXCLUDED.as_of
                 WHERE player_factions.as_of <= EXCLUDED.as_of"
        }
        Side::Npc => {
            "INSERT INTO npc_factions (npc_id, factions, as_of)
             SELECT id, factions, as_of
             FROM jsonb_to_recordset($1) AS r(id uuid, factions text[], as_of timestamptz)
             ON CONFLICT (npc_id) DO UPDATE
                 SET factions = EXCLUDED.factions, as_of = EXCLUDED.as_of
                 WHERE npc_factions.as_of <= EXCLUDED.as_of"
        }
    };
    sqlx::query(statement).bind(document).execute(connection).await?;
    Ok(())
}

fn newest_per_id(memberships: &[FactionMembership]) -> Vec<&FactionMembership> {
    let mut newest: std::collections::HashMap<Uuid, &FactionMembership> =
        std::collections::HashMap::with_capacity(memberships.len());
    for membership in memberships {
        newest
            .entry(membership.id)
            .and_modify(|kept| {
                if membership.as_of >= kept.as_of {
                    *kept = membership;
                }
            })
            .or_insert(membership);
    }
    // A fixed order keeps concurrent upserts of the same rows deadlock-free.
    let mut newest: Vec<&FactionMembership> = newest.into_values().collect();
    newest.sort_unstable_by_key(|membership| membership.id);
    newest
}

pub async fn get(connection: &mut PgConnection, side: Side, id: Uuid) -> StoreResult<Option<Vec<String>>> {
    let statement = match side {
        Side::Player => "SELECT factions FROM player_factions WHERE player_id = $1",
        Side::Npc => "SELECT factions FROM npc_factions WHERE npc_id = $1",
    };
    let factions = sqlx::query_scalar(statement).bind(id).fetch_optional(connection).await?;
    Ok(factions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_membership_wins_within_a_batch() {
        let id = Uuid::new_v4();
        let older = FactionMembership { id, factions: vec!["old".into()], as_of: Utc::now() };
        let newer =
            FactionMembership { id, factions: vec!["new".into()], as_of: older.as_of + chrono::Duration::seconds(5) };
        let memberships = [newer.clone(), older];
        let kept = newest_per_id(&memberships);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].factions, vec!["new".to_string()]);
    }
}
