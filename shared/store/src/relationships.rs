//! Relationships, the applied-conversations ledger, faction attitudes and faction
//! reputation (migrations 0004, 0018). Relationship writes are optimistic: an update
//! names the version it read, and the caller retries what another writer changed first.
//! Reputation is recomputed under a lock per (faction, player) instead, since its first
//! write has no row to name a version of.

use chrono::{DateTime, NaiveDate, Utc};
use npcmem_core::relationship::factions::FactionsFile;
use npcmem_core::relationship::{Attitude, Dims, Relationship, Stage};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;
use crate::factions::{FactionMembership, Side};

type Pair = (Uuid, Uuid);

/// The conversations of `conversation_ids` whose deltas were already applied.
pub async fn applied(connection: &mut PgConnection, conversation_ids: &[Uuid]) -> StoreResult<Vec<Uuid>> {
    let ids = sqlx::query_scalar("SELECT conversation_id FROM applied_conversations WHERE conversation_id = ANY($1)")
        .bind(conversation_ids)
        .fetch_all(connection)
        .await?;
    Ok(ids)
}

#[derive(sqlx::FromRow)]
struct Row {
    npc_id: Uuid,
    player_id: Uuid,
    trust: f64,
    fear: f64,
    respect: f64,
    loyalty: f64,
    friendliness: f64,
    romantic_interest: f64,
    disposition: f64,
    stage: String,
    interaction_count: i32,
    memory_count: i32,
    first_interaction: Option<DateTime<Utc>>,
    last_interaction: Option<DateTime<Utc>>,
    gains_day: Option<NaiveDate>,
    gains: Vec<f64>,
    version: i64,
}

impl Row {
    fn into_relationship(self) -> (Pair, Relationship) {
        let mut gains = [0.0; 6];
        for (slot, value) in gains.iter_mut().zip(self.gains) {
            *slot = value;
        }
        let relationship = Relationship {
            dims: [self.trust, self.fear, self.respect, self.loyalty, self.friendliness, self.romantic_interest],
            disposition: self.disposition,
            stage: Stage::parse(&self.stage).unwrap_or(Stage::Acquaintance),
            interaction_count: self.interaction_count,
            memory_count: self.memory_count,
            first_interaction: self.first_interaction,
            last_interaction: self.last_interaction,
            gains_day: self.gains_day,
            gains,
            version: self.version,
        };
        ((self.npc_id, self.player_id), relationship)
    }
}

const COLUMNS: &str = "npc_id, player_id, trust, fear, respect, loyalty, friendliness, romantic_interest,
    disposition, stage, interaction_count, memory_count, first_interaction, last_interaction, gains_day, gains,
    version";

/// The stored relationships of `pairs` (missing pairs are simply absent). No lock: the
/// write that follows checks the version.
pub async fn load(connection: &mut PgConnection, pairs: &[Pair]) -> StoreResult<Vec<(Pair, Relationship)>> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (npc_ids, player_ids): (Vec<Uuid>, Vec<Uuid>) = pairs.iter().copied().unzip();
    let statement = format!(
        "SELECT {COLUMNS} FROM relationships
         WHERE (npc_id, player_id) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))"
    );
    let rows: Vec<Row> =
        sqlx::query_as(sqlx::AssertSqlSafe(statement)).bind(&npc_ids).bind(&player_ids).fetch_all(connection).await?;
    Ok(rows.into_iter().map(Row::into_relationship).collect())
}

/// One relationship to write: its new state and the version it was read at (None: new).
pub struct Write<'a> {
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub relationship: &'a Relationship,
    pub read_version: Option<i64>,
}

#[derive(Serialize)]
struct WriteRow<'a> {
    npc_id: Uuid,
    player_id: Uuid,
    trust: f64,
    fear: f64,
    respect: f64,
    loyalty: f64,
    friendliness: f64,
    romantic_interest: f64,
    disposition: f64,
    stage: &'static str,
    interaction_count: i32,
    memory_count: i32,
    first_interaction: Option<DateTime<Utc>>,
    last_interaction: Option<DateTime<Utc>>,
    gains_day: Option<NaiveDate>,
    gains: &'a Dims,
    version: i64,
    read_version: i64,
}

impl<'a> WriteRow<'a> {
    fn of(write: &Write<'a>) -> Self {
        let r = write.relationship;
        Self {
            npc_id: write.npc_id,
            player_id: write.player_id,
            trust: r.dims[0],
            fear: r.dims[1],
            respect: r.dims[2],
            loyalty: r.dims[3],
            friendliness: r.dims[4],
            romantic_interest: r.dims[5],
            disposition: r.disposition,
            stage: r.stage.as_str(),
            interaction_count: r.interaction_count,
            memory_count: r.memory_count,
            first_interaction: r.first_interaction,
            last_interaction: r.last_interaction,
            gains_day: r.gains_day,
            gains: &r.gains,
            version: r.version,
            read_version: write.read_version.unwrap_or(0),
        }
    }
}

const RECORD: &str = "r(npc_id uuid, player_id uuid, trust float8, fear float8, respect float8, loyalty float8,
    friendliness float8, romantic_interest float8, disposition float8, stage text, interaction_count int4,
    memory_count int4, first_interaction timestamptz, last_interaction timestamptz, gains_day date,
    gains float8[], version int8, read_version int8)";

/// Writes every relationship whose row is still at its read version (or, for a new one,
/// does not exist yet); returns the pairs written. A pair missing from the result was
/// changed by another writer: the caller rolls back and retries.
pub async fn write(connection: &mut PgConnection, writes: &[Write<'_>]) -> StoreResult<Vec<Pair>> {
    let mut written = Vec::with_capacity(writes.len());
    let mut sorted: Vec<&Write<'_>> = writes.iter().collect();
    // One lock order for every writer.
    sorted.sort_unstable_by_key(|write| (write.npc_id, write.player_id));
    let (new, existing): (Vec<&Write<'_>>, Vec<&Write<'_>>) =
        sorted.into_iter().partition(|w| w.read_version.is_none());
    if !new.is_empty() {
        let rows: Vec<WriteRow<'_>> = new.iter().map(|write| WriteRow::of(write)).collect();
        let statement = format!(
            "INSERT INTO relationships ({COLUMNS})
             SELECT {COLUMNS} FROM jsonb_to_recordset($1) AS {RECORD}
             ON CONFLICT (npc_id, player_id) DO NOTHING
             RETURNING npc_id, player_id"
        );
        let inserted: Vec<Pair> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
            .bind(sqlx::types::Json(&rows))
            .fetch_all(&mut *connection)
            .await?;
        written.extend(inserted);
    }
    if !existing.is_empty() {
        let rows: Vec<WriteRow<'_>> = existing.iter().map(|write| WriteRow::of(write)).collect();
        let statement = format!(
            "UPDATE relationships AS t SET
                 trust = r.trust, fear = r.fear, respect = r.respect, loyalty = r.loyalty,
                 friendliness = r.friendliness, romantic_interest = r.romantic_interest,
                 disposition = r.disposition, stage = r.stage, interaction_count = r.interaction_count,
                 memory_count = r.memory_count, first_interaction = r.first_interaction,
                 last_interaction = r.last_interaction, gains_day = r.gains_day, gains = r.gains,
                 version = r.version, updated_at = now()
             FROM jsonb_to_recordset($1) AS {RECORD}
             WHERE t.npc_id = r.npc_id AND t.player_id = r.player_id AND t.version = r.read_version
             RETURNING t.npc_id, t.player_id"
        );
        let updated: Vec<Pair> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
            .bind(sqlx::types::Json(&rows))
            .fetch_all(&mut *connection)
            .await?;
        written.extend(updated);
    }
    Ok(written)
}

/// One ledger row: a conversation applied to a pair, at the version it produced.
#[derive(Debug, Clone, Serialize)]
pub struct AppliedConversation {
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub version: i64,
    pub deltas: Dims,
    pub memory_count: i32,
    pub ended_at: DateTime<Utc>,
}

/// Records applied conversations; returns how many were new (fewer than given means
/// another writer applied some of them first: roll back and retry).
pub async fn record_applied(connection: &mut PgConnection, rows: &[AppliedConversation]) -> StoreResult<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let result = sqlx::query(
        "INSERT INTO applied_conversations (conversation_id, npc_id, player_id, version, deltas, memory_count, ended_at)
         SELECT conversation_id, npc_id, player_id, version, deltas, memory_count, ended_at
         FROM jsonb_to_recordset($1) AS r(conversation_id uuid, npc_id uuid, player_id uuid, version int8,
                                          deltas float8[], memory_count int4, ended_at timestamptz)
         ON CONFLICT (conversation_id) DO NOTHING",
    )
    .bind(sqlx::types::Json(rows))
    .execute(connection)
    .await?;
    Ok(result.rows_affected())
}

/// A pair's ledger in the order of application.
pub async fn ledger(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
) -> StoreResult<Vec<AppliedConversation>> {
    type LedgerRow = (Uuid, i64, Vec<f64>, i32, DateTime<Utc>);
    let rows: Vec<LedgerRow> = sqlx::query_as(
        "SELECT conversation_id, version, deltas, memory_count, ended_at FROM applied_conversations
         WHERE npc_id = $1 AND player_id = $2 ORDER BY version",
    )
    .bind(npc_id)
    .bind(player_id)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(conversation_id, version, deltas, memory_count, ended_at)| {
            let mut dims = [0.0; 6];
            for (slot, value) in dims.iter_mut().zip(deltas) {
                *slot = value;
            }
            AppliedConversation { conversation_id, npc_id, player_id, version, deltas: dims, memory_count, ended_at }
        })
        .collect())
}

/// How the given factions regard others: (faction, toward, attitude).
pub async fn attitudes(
    connection: &mut PgConnection,
    factions: &[String],
) -> StoreResult<Vec<(String, String, Attitude)>> {
    if factions.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT faction, toward, attitude FROM faction_attitudes WHERE faction = ANY($1)")
            .bind(factions)
            .fetch_all(connection)
            .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(faction, toward, attitude)| Attitude::parse(&attitude).map(|a| (faction, toward, a)))
        .collect())
}

/// One (faction, player) reputation before and after a recomputation.
#[derive(Debug, Clone, PartialEq)]
pub struct ReputationChange {
    pub faction: String,
    pub player_id: Uuid,
    pub old: Option<f64>,
    pub new: f64,
    pub npcs_known: i64,
    /// The row's version after this write: one more than the version `old` was read at.
    pub version: i64,
}

/// Recomputes faction reputation (the mean disposition of the faction's NPCs
/// who know the player) for each (faction, player). Takes each key's reputation lock
/// first, so no other transaction writes the key until this one ends: `old` is the value
/// this write replaces, and the mean, read by a statement that starts after the lock, sees
/// every relationship the previous holder committed. Two batches in flight therefore see
/// a crossing once, in one of them.
pub async fn recompute_reputation(
    connection: &mut PgConnection,
    keys: &[(String, Uuid)],
) -> StoreResult<Vec<ReputationChange>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut sorted = keys.to_vec();
    sorted.sort();
    sorted.dedup();
    crate::locks::lock_reputations(&mut *connection, &sorted).await?;
    let (factions, players): (Vec<String>, Vec<Uuid>) = sorted.into_iter().unzip();
    // `old` is read without FOR UPDATE: the lock above already excludes other writers, and
    // a row lock on a row this same statement's upsert changes is silently skipped (it
    // used to leave `old` empty, so every recomputation announced crossings from 0).
    let rows: Vec<(String, Uuid, Option<f64>, f64, i64, i64)> = sqlx::query_as(
        "WITH keys AS (
             SELECT * FROM unnest($1::text[], $2::uuid[]) AS k(faction, player_id)
         ),
         old AS (
             SELECT f.faction, f.player_id, f.reputation FROM faction_reputation f
             JOIN keys USING (faction, player_id)
         ),
         computed AS (
             SELECT k.faction, k.player_id, avg(r.disposition) AS reputation, count(*) AS npcs_known
             FROM keys k
             JOIN relationships r ON r.player_id = k.player_id AND r.interaction_count > 0
             JOIN npc_factions n ON n.npc_id = r.npc_id AND k.faction = ANY(n.factions)
             GROUP BY k.faction, k.player_id
         ),
         written AS (
             INSERT INTO faction_reputation (faction, player_id, reputation, npcs_known, version)
             SELECT faction, player_id, round(reputation::numeric, 3)::float8, npcs_known, 1 FROM computed
             ON CONFLICT (faction, player_id) DO UPDATE
                 SET reputation = EXCLUDED.reputation, npcs_known = EXCLUDED.npcs_known,
                     version = coalesce(faction_reputation.version, 0) + 1, updated_at = now()
             RETURNING faction, player_id, reputation, npcs_known, version
         )
         SELECT w.faction, w.player_id, o.reputation, w.reputation, w.npcs_known::int8, w.version
         FROM written w LEFT JOIN old o USING (faction, player_id)",
    )
    .bind(&factions)
    .bind(&players)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(faction, player_id, old, new, npcs_known, version)| ReputationChange {
            faction,
            player_id,
            old,
            new,
            npcs_known,
            version,
        })
        .collect())
}

/// What loading a factions file wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactionsLoaded {
    pub factions: u64,
    pub attitudes: u64,
    pub npcs: u64,
}

/// Loads a factions file in one transaction's worth of statements: upserts each
/// faction, replaces its attitudes, and records the NPC memberships as of now. Loading
/// the same file twice changes nothing.
pub async fn load_factions_file(connection: &mut PgConnection, file: &FactionsFile) -> StoreResult<FactionsLoaded> {
    let mut attitudes_written = 0;
    for faction in &file.factions {
        sqlx::query(
            "INSERT INTO factions (faction, name, description) VALUES ($1, $2, $3)
             ON CONFLICT (faction) DO UPDATE
                 SET name = EXCLUDED.name, description = EXCLUDED.description, updated_at = now()
                 WHERE (factions.name, factions.description) IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.description)",
        )
        .bind(&faction.id)
        .bind(&faction.name)
        .bind(&faction.description)
        .execute(&mut *connection)
        .await?;
        sqlx::query("DELETE FROM faction_attitudes WHERE faction = $1")
            .bind(&faction.id)
            .execute(&mut *connection)
            .await?;
        let towards: Vec<&str> = faction.attitudes.keys().map(String::as_str).collect();
        let attitudes: Vec<&str> = faction.attitudes.values().map(Attitude::as_str).collect();
        let result = sqlx::query(
            "INSERT INTO faction_attitudes (faction, toward, attitude)
             SELECT $1, toward, attitude FROM unnest($2::text[], $3::text[]) AS a(toward, attitude)",
        )
        .bind(&faction.id)
        .bind(&towards)
        .bind(&attitudes)
        .execute(&mut *connection)
        .await?;
        attitudes_written += result.rows_affected();
    }
    let now = Utc::now();
    let memberships: Vec<FactionMembership> = file
        .npcs
        .iter()
        .map(|npc| FactionMembership { id: npc.id, factions: npc.factions.clone(), as_of: now })
        .collect();
    crate::factions::record_batch(connection, Side::Npc, &memberships).await?;
    Ok(FactionsLoaded {
        factions: file.factions.len() as u64,
        attitudes: attitudes_written,
        npcs: file.npcs.len() as u64,
    })
}
