//! Transaction-scoped advisory locks that serialise work on one NPC–player pair, one
//! player or one (faction, player) reputation across replicas and concurrent batches.
//! Keys are derived from the UUIDs with a fixed fold (not a per-process hash) so every
//! replica and every build agrees on them; a collision only serialises two unrelated
//! keys, it never breaks correctness.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// Lock classes, the first key of the two-key advisory lock functions.
const PLAYER_LOCK_CLASS: i32 = 2;
const REPUTATION_LOCK_CLASS: i32 = 4;

/// What a pair lock protects. Separate classes so that ingest trimming a pair's working
/// memory and extract capping the same pair's memories do not wait for each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairScope {
    WorkingMemory,
    Memories,
}

impl PairScope {
    fn class(self) -> i32 {
        match self {
            PairScope::WorkingMemory => 1,
            PairScope::Memories => 3,
        }
    }
}

fn fold(value: u128) -> i32 {
    let folded = (value as u64) ^ ((value >> 64) as u64);
    ((folded as u32) ^ ((folded >> 32) as u32)) as i32
}

pub fn pair_key(npc_id: Uuid, player_id: Uuid) -> i32 {
    fold(npc_id.as_u128() ^ player_id.as_u128().rotate_left(47))
}

pub fn player_key(player_id: Uuid) -> i32 {
    fold(player_id.as_u128())
}

/// Faction names are free text: a name-based UUID of the faction under the player gives
/// 128 stable bits to fold.
pub fn reputation_key(faction: &str, player_id: Uuid) -> i32 {
    fold(Uuid::new_v5(&player_id, faction.as_bytes()).as_u128())
}

fn sorted_unique(mut keys: Vec<i32>) -> Vec<i32> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Exclusive locks on the pairs within `scope`, taken in key order so two batches cannot
/// deadlock; held until the transaction ends. Ingest takes them before trimming working
/// memory, extract before enforcing the memory caps.
pub async fn lock_pairs(connection: &mut PgConnection, scope: PairScope, pairs: &[(Uuid, Uuid)]) -> StoreResult<()> {
    let keys = sorted_unique(pairs.iter().map(|(npc, player)| pair_key(*npc, *player)).collect());
    if keys.is_empty() {
        return Ok(());
    }
    // Volatile target-list functions run after ORDER BY, so the locks follow key order.
    sqlx::query("SELECT pg_advisory_xact_lock($1, key) FROM UNNEST($2::int4[]) AS key ORDER BY key")
        .bind(scope.class())
        .bind(&keys)
        .execute(connection)
        .await?;
    Ok(())
}

/// Shared locks on players: recording a conversation holds it, so forgetting the player
/// (which takes it exclusively) waits for in-flight recordings and they for it.
pub async fn lock_players_shared(connection: &mut PgConnection, player_ids: &[Uuid]) -> StoreResult<()> {
    let keys = sorted_unique(player_ids.iter().map(|player| player_key(*player)).collect());
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1, key) FROM UNNEST($2::int4[]) AS key ORDER BY key")
        .bind(PLAYER_LOCK_CLASS)
        .bind(&keys)
        .execute(connection)
        .await?;
    Ok(())
}

/// Exclusive locks on (faction, player) reputations, in key order, until the transaction
/// ends. A row lock cannot do this: a player's first reputation with a faction has no row
/// yet, and two batches that both found none would both announce the first crossing.
/// Relate takes them last in its transaction, after its relationship writes, and waits on
/// no row while holding them, so they add no lock cycle.
pub async fn lock_reputations(connection: &mut PgConnection, keys: &[(String, Uuid)]) -> StoreResult<()> {
    let keys = sorted_unique(keys.iter().map(|(faction, player)| reputation_key(faction, *player)).collect());
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_xact_lock($1, key) FROM UNNEST($2::int4[]) AS key ORDER BY key")
        .bind(REPUTATION_LOCK_CLASS)
        .bind(&keys)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn lock_player_exclusive(connection: &mut PgConnection, player_id: Uuid) -> StoreResult<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind(PLAYER_LOCK_CLASS)
        .bind(player_key(player_id))
        .execute(connection)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_depend_on_both_sides() {
        let npc = Uuid::from_u128(0x6f1c_2a9e_0b7d_4e21_9c3a_5d8e_7f10_2b46);
        let player = Uuid::from_u128(0x1d4b_8e02_c6a7_4f93_8b15_e2c9_04d7_a358);
        assert_eq!(pair_key(npc, player), pair_key(npc, player));
        assert_ne!(pair_key(npc, player), pair_key(player, npc), "the pair is ordered");
        assert_eq!(sorted_unique(vec![3, 1, 3, 2]), vec![1, 2, 3]);
        assert_eq!(reputation_key("smiths_guild", player), reputation_key("smiths_guild", player));
        assert_ne!(reputation_key("smiths_guild", player), reputation_key("city_guard", player));
        assert_ne!(reputation_key("smiths_guild", player), reputation_key("smiths_guild", npc));
    }
}
