//! Knowledge facts, NPC locations and profiles as the gossip service writes and loads
//! them (migration 0007).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use npcmem_core::gossip::contradiction::{Outcome, Revision};
use npcmem_core::gossip::{Drives, HeldFact, MAX_FACTS_PER_NPC};
use npcmem_core::perspective::Perspective;
use npcmem_core::wire::KnowledgeCategory;
use sqlx::postgres::{PgArguments, PgHasArrayType, PgTypeInfo};
use sqlx::{Arguments, PgConnection};
use uuid::Uuid;

use crate::error::StoreResult;
use crate::outbox::OutboxMessage;

/// How a fact reached its holder (seed `KnowledgeSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    DirectObservation,
    Conversation,
    Gossip,
    Authored,
}

impl Source {
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::DirectObservation => "direct_observation",
            Source::Conversation => "conversation",
            Source::Gossip => "gossip",
            Source::Authored => "authored",
        }
    }
}

/// A fact to store, with how it was learned.
#[derive(Debug, Clone)]
pub struct NewFact {
    pub fact: HeldFact,
    pub source: Source,
    pub source_memory_id: Option<Uuid>,
    pub speaker_id: Option<Uuid>,
}

/// Whether a batch of new facts may hold some their holders already know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Redeliveries and replays: duplicates are skipped row by row.
    Possible,
    /// The caller checked against what it knows (the gossip leader's memory, loaded at
    /// `loaded_since`, its watermark): the batch is first inserted as is, which costs
    /// Postgres less than checking every row for a conflict, and only when a duplicate
    /// turns up anyway is it inserted again the careful way. If a listener learned a fact
    /// since that the caller could not check the batch against, nothing is inserted and
    /// the error says so ([`is_unchecked`]). The failed statement aborts a surrounding
    /// transaction: only outside one.
    Unlikely { loaded_since: DateTime<Utc> },
}

/// Whether `error` is [`insert_facts`] refusing a [`Known::Unlikely`] batch because a
/// listener learned a fact since the caller's memory was loaded: check the batch for
/// contradictions in Postgres and write it again.
pub fn is_unchecked(error: &crate::StoreError) -> bool {
    matches!(error, crate::StoreError::Other(sqlx::Error::Database(error)) if error.code().as_deref() == Some(UNSEEN_LEARNING))
}

/// The constraint that makes a fact unique per holder and origin (migration 0007).
const UNIQUE_PER_HOLDER: &str = "knowledge_facts_npc_id_origin_fact_id_key";
/// What `gossip_copies_may_go` raises (migration 0015) when a speaker no longer holds a
/// fact it tells, and when a listener learned a fact the caller had not loaded.
const SPEAKER_FORGOT: &str = "NPG01";
const UNSEEN_LEARNING: &str = "NPG02";

/// Inserts facts an NPC does not know yet (unique per holder and origin) and, in the same
/// statement, queues the outbox messages of the facts actually inserted (each message
/// names its fact), so a duplicate announces nothing and a tick's write is one round
/// trip. A gossip copy (one with a speaker) is only stored while its speaker still holds
/// the origin fact. Returns the ids stored. Callers then hold the holders to their cap
/// ([`enforce_fact_caps`]). The outbox columns are those of `outbox::enqueue`.
pub async fn insert_facts(
    connection: &mut PgConnection,
    facts: &[NewFact],
    messages: &[(Uuid, OutboxMessage)],
    known: Known,
) -> StoreResult<Vec<Uuid>> {
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    if let Known::Unlikely { loaded_since } = known {
        // All or nothing: on success every fact was stored, so no ids need to come back.
        let mut arguments = fact_arguments(facts, messages)?;
        arguments.add(loaded_since).map_err(sqlx::Error::Encode)?;
        match sqlx::query_with(INSERT_NEW_FACTS, arguments).execute(&mut *connection).await {
            Err(sqlx::Error::Database(error))
                if error.constraint() == Some(UNIQUE_PER_HOLDER) || error.code().as_deref() == Some(SPEAKER_FORGOT) =>
            {
                tracing::debug!(%error, "a fact thought new was known or forgotten: inserting again, skipping those");
            }
            inserted => {
                inserted?;
                return Ok(facts.iter().map(|new| new.fact.id).collect());
            }
        }
    }
    let inserted = sqlx::query_scalar_with(INSERT_FACTS_SKIPPING_KNOWN, fact_arguments(facts, messages)?)
        .fetch_all(&mut *connection)
        .await?;
    Ok(inserted)
}

/// The facts' part of [`insert_facts`]' statements: the rows `$where` lets through, in
/// lock order.
macro_rules! insert_facts_sql {
    ($where:literal, $conflict:literal) => {
        concat!(
            "INSERT INTO knowledge_facts (id, npc_id, category, subject_id, content, tags, confidence, importance,
                                          source, source_memory_id, origin_fact_id, hop_count, provenance,
                                          speaker_id, expires_at, actor_id, target_id, statement,
                                          about_npc_id, about_npc_name, about_player_name)
             SELECT * FROM UNNEST($1::knowledge_fact_row[]) AS f ",
            $where,
            " ORDER BY npc_id, origin_fact_id ",
            $conflict
        )
    };
}

/// The outbox columns (those of `outbox::enqueue`), each message naming its fact.
macro_rules! queue_messages_sql {
    ($numbered:literal) => {
        concat!(
            "INSERT INTO outbox (subject, msg_id, payload, headers)
             SELECT m.subject, m.msg_id, m.payload, m.headers::jsonb
             FROM UNNEST($2::uuid[], $3::text[], $4::text[], $5::bytea[], $6::text[]) ",
            $numbered
        )
    };
}

/// All or nothing: every message goes out, in the order given (a function scan keeps it).
/// Fails ([`UNSEEN_LEARNING`], [`SPEAKER_FORGOT`]) unless the copies may go as planned.
const INSERT_NEW_FACTS: &str = concat!(
    "WITH inserted AS (",
    insert_facts_sql!("WHERE gossip_copies_may_go($1, $7)", ""),
    ")
         ",
    queue_messages_sql!("AS m(fact_id, subject, msg_id, payload, headers)")
);
/// Only the messages of facts inserted, in order; returns the ids inserted. A gossip copy
/// whose speaker no longer holds its origin fact is skipped too.
const INSERT_FACTS_SKIPPING_KNOWN: &str = concat!(
    "WITH inserted AS (",
    insert_facts_sql!(
        "WHERE f.speaker_id IS NULL
            OR EXISTS (SELECT 1 FROM knowledge_facts k WHERE k.npc_id = f.speaker_id AND k.origin_fact_id = f.origin_fact_id)",
        "ON CONFLICT (npc_id, origin_fact_id) DO NOTHING RETURNING id"
    ),
    "),
         queued AS (",
    queue_messages_sql!(
        "WITH ORDINALITY AS m(fact_id, subject, msg_id, payload, headers, position)
             WHERE m.fact_id IN (SELECT id FROM inserted)
             ORDER BY m.position"
    ),
    ")
         SELECT id FROM inserted"
);

/// A fact as [`insert_facts`] sends it: a `knowledge_fact_row` (migration 0014), fields in
/// its order. The facts travel as one binary array of these.
#[derive(sqlx::Encode)]
struct FactRow<'a> {
    id: Uuid,
    npc_id: Uuid,
    category: &'a str,
    subject_id: Option<Uuid>,
    content: &'a str,
    tags: &'a [String],
    confidence: f64,
    importance: f64,
    source: &'a str,
    source_memory_id: Option<Uuid>,
    origin_fact_id: Uuid,
    hop_count: i32,
    provenance: &'a [Uuid],
    speaker_id: Option<Uuid>,
    expires_at: Option<DateTime<Utc>>,
    actor_id: Option<Uuid>,
    target_id: Option<Uuid>,
    statement: Option<&'a str>,
    about_npc_id: Option<Uuid>,
    about_npc_name: Option<&'a str>,
    about_player_name: Option<&'a str>,
}

impl sqlx::Type<sqlx::Postgres> for FactRow<'_> {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_name("knowledge_fact_row")
    }
}

impl PgHasArrayType for FactRow<'_> {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_name("_knowledge_fact_row")
    }
}

impl<'a> FactRow<'a> {
    fn of(new: &'a NewFact) -> Self {
        let fact = &new.fact;
        let perspective = fact.perspective.as_deref();
        Self {
            id: fact.id,
            npc_id: fact.holder,
            category: fact.category.as_str(),
            subject_id: fact.subject_id,
            content: &fact.content,
            tags: &fact.tags,
            confidence: fact.confidence,
            importance: fact.importance,
            source: new.source.as_str(),
            source_memory_id: new.source_memory_id,
            origin_fact_id: fact.origin_fact_id,
            hop_count: fact.hop_count,
            provenance: &fact.provenance,
            speaker_id: new.speaker_id,
            expires_at: fact.expires_at,
            actor_id: perspective.and_then(|p| p.actor_id),
            target_id: perspective.and_then(|p| p.target_id),
            statement: perspective.and_then(|p| p.statement.as_deref()),
            about_npc_id: perspective.and_then(|p| p.npc_id),
            about_npc_name: perspective.and_then(|p| p.npc_name.as_deref()),
            about_player_name: perspective.and_then(|p| p.player_name.as_deref()),
        }
    }
}

/// The arguments of [`insert_facts`]' statements: the facts, then the messages' columns.
fn fact_arguments(facts: &[NewFact], messages: &[(Uuid, OutboxMessage)]) -> Result<PgArguments, sqlx::Error> {
    let rows: Vec<FactRow<'_>> = facts.iter().map(FactRow::of).collect();
    let fact_ids: Vec<Uuid> = messages.iter().map(|(fact_id, _)| *fact_id).collect();
    let subjects: Vec<&str> = messages.iter().map(|(_, m)| m.subject.as_str()).collect();
    let msg_ids: Vec<Option<&str>> = messages.iter().map(|(_, m)| m.msg_id.as_deref()).collect();
    let payloads: Vec<&[u8]> = messages.iter().map(|(_, m)| m.payload.as_slice()).collect();
    let headers: Vec<String> = messages
        .iter()
        .map(|(_, m)| serde_json::to_string(&m.headers).expect("string maps always serialise"))
        .collect();
    let mut arguments = PgArguments::default();
    macro_rules! add {
        ($($column:expr),*) => { $(arguments.add($column).map_err(sqlx::Error::Encode)?;)* };
    }
    add!(&rows, &fact_ids, &subjects, &msg_ids, &payloads, &headers);
    Ok(arguments)
}

/// Keeps each holder at most [`MAX_FACTS_PER_NPC`] facts, dropping the least important
/// (seed `_evict_lowest_importance`). Returns the ids dropped.
pub async fn enforce_fact_caps(connection: &mut PgConnection, holders: &[Uuid]) -> StoreResult<Vec<Uuid>> {
    if holders.is_empty() {
        return Ok(Vec::new());
    }
    let mut holders = holders.to_vec();
    holders.sort_unstable();
    holders.dedup();
    let deleted = sqlx::query_scalar(
        "DELETE FROM knowledge_facts WHERE id IN (
             SELECT id FROM (
                 SELECT id, row_number() OVER (PARTITION BY npc_id ORDER BY importance DESC, created_at DESC, id) AS rank
                 FROM knowledge_facts WHERE npc_id = ANY($1)) AS ranked
             WHERE rank > $2)
         RETURNING id",
    )
    .bind(&holders)
    .bind(MAX_FACTS_PER_NPC as i64)
    .fetch_all(connection)
    .await?;
    Ok(deleted)
}

/// Drops the deletion log's rows (migration 0015) older than `before`.
pub async fn prune_forgotten(connection: &mut PgConnection, before: DateTime<Utc>) -> StoreResult<u64> {
    let pruned = sqlx::query("DELETE FROM knowledge_forgotten WHERE forgotten_at < $1")
        .bind(before)
        .execute(connection)
        .await?
        .rows_affected();
    Ok(pruned)
}

#[derive(sqlx::FromRow)]
struct StoredFact {
    id: Uuid,
    origin_fact_id: Uuid,
    npc_id: Uuid,
    category: String,
    subject_id: Option<Uuid>,
    content: String,
    tags: Vec<String>,
    confidence: f64,
    importance: f64,
    hop_count: i32,
    provenance: Vec<Uuid>,
    expires_at: Option<DateTime<Utc>>,
    #[sqlx(flatten)]
    perspective: PerspectiveColumns,
}

/// A fact's perspective columns (migration 0017), as read.
#[derive(sqlx::FromRow)]
pub(crate) struct PerspectiveColumns {
    actor_id: Option<Uuid>,
    target_id: Option<Uuid>,
    statement: Option<String>,
    about_npc_id: Option<Uuid>,
    about_npc_name: Option<String>,
    about_player_name: Option<String>,
}

impl PerspectiveColumns {
    pub(crate) fn into_perspective(self) -> Perspective {
        Perspective {
            actor_id: self.actor_id,
            target_id: self.target_id,
            statement: self.statement,
            npc_id: self.about_npc_id,
            npc_name: self.about_npc_name,
            player_name: self.about_player_name,
        }
    }
}

const STORED_FACT_COLUMNS: &str = "id, origin_fact_id, npc_id, category, subject_id, content, tags, confidence, \
     importance, hop_count, provenance, expires_at, actor_id, target_id, statement, about_npc_id, about_npc_name, \
     about_player_name";

impl StoredFact {
    fn into_held(self) -> Option<HeldFact> {
        Some(HeldFact {
            id: self.id,
            origin_fact_id: self.origin_fact_id,
            holder: self.npc_id,
            category: KnowledgeCategory::parse(&self.category)?,
            subject_id: self.subject_id,
            content: self.content,
            tags: self.tags,
            confidence: self.confidence,
            importance: self.importance,
            hop_count: self.hop_count,
            provenance: self.provenance,
            expires_at: self.expires_at,
            perspective: Some(self.perspective.into_perspective())
                .filter(|perspective| !perspective.is_empty())
                .map(Arc::new),
        })
    }
}

/// A fact learned or revised since the last refresh, as the gossip leader reloads it.
#[derive(Debug, Clone)]
pub struct ChangedFact {
    pub fact: HeldFact,
    pub superseded: bool,
}

#[derive(sqlx::FromRow)]
struct ChangedRow {
    #[sqlx(flatten)]
    fact: StoredFact,
    superseded: bool,
}

/// What the holders of `facts` hold that a new fact could contradict: facts of the same
/// category and subject, neither superseded nor expired, and of those only the ones
/// `keep` accepts. Rows are read one at a time, so a holder with hundreds of facts on one
/// subject (a player it has met every day) costs no memory beyond the facts kept.
pub async fn contradiction_candidates(
    connection: &mut PgConnection,
    facts: &[HeldFact],
    now: DateTime<Utc>,
    mut keep: impl FnMut(&HeldFact) -> bool,
) -> StoreResult<Vec<HeldFact>> {
    use futures::TryStreamExt as _;
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    let holders: Vec<Uuid> = facts.iter().map(|fact| fact.holder).collect();
    let categories: Vec<&str> = facts.iter().map(|fact| fact.category.as_str()).collect();
    let subjects: Vec<Option<Uuid>> = facts.iter().map(|fact| fact.subject_id).collect();
    let statement = format!(
        "SELECT {STORED_FACT_COLUMNS} FROM knowledge_facts k
         WHERE EXISTS (SELECT 1 FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS n(npc_id, category, subject_id)
                       WHERE k.npc_id = n.npc_id AND k.category = n.category
                         AND k.subject_id IS NOT DISTINCT FROM n.subject_id)
           AND k.npc_id = ANY($1) AND k.superseded_by IS NULL AND (k.expires_at IS NULL OR k.expires_at > $4)"
    );
    let mut rows = sqlx::query_as::<_, StoredFact>(sqlx::AssertSqlSafe(statement))
        .bind(&holders)
        .bind(&categories)
        .bind(&subjects)
        .bind(now)
        .fetch(connection);
    let mut kept = Vec::new();
    while let Some(row) = rows.try_next().await? {
        if let Some(fact) = row.into_held()
            && keep(&fact)
        {
            kept.push(fact);
        }
    }
    Ok(kept)
}

/// Applies contradiction revisions (in order: a fact doubted twice ends at the later
/// confidence) and stamps `revised_at`. Returns the rows changed.
pub async fn apply_revisions(connection: &mut PgConnection, revisions: &[Revision]) -> StoreResult<u64> {
    if revisions.is_empty() {
        return Ok(0);
    }
    let mut final_state: Vec<(Uuid, Option<Uuid>, Option<f64>)> = Vec::new();
    for revision in revisions {
        let index = match final_state.iter().position(|(id, _, _)| *id == revision.fact_id) {
            Some(index) => index,
            None => {
                final_state.push((revision.fact_id, None, None));
                final_state.len() - 1
            }
        };
        match revision.outcome {
            Outcome::Superseded => final_state[index].1 = Some(revision.by),
            Outcome::Doubted { confidence } => final_state[index].2 = Some(confidence),
        }
    }
    final_state.sort_by_key(|(id, _, _)| *id);
    let ids: Vec<Uuid> = final_state.iter().map(|state| state.0).collect();
    let superseded_by: Vec<Option<Uuid>> = final_state.iter().map(|state| state.1).collect();
    let confidences: Vec<Option<f64>> = final_state.iter().map(|state| state.2).collect();
    let changed = sqlx::query(
        "UPDATE knowledge_facts AS k
         SET superseded_by = COALESCE(r.superseded_by, k.superseded_by),
             confidence = COALESCE(r.confidence, k.confidence), revised_at = now()
         FROM unnest($1::uuid[], $2::uuid[], $3::float8[]) AS r(id, superseded_by, confidence)
         WHERE k.id = r.id",
    )
    .bind(&ids)
    .bind(&superseded_by)
    .bind(&confidences)
    .execute(connection)
    .await?
    .rows_affected();
    Ok(changed)
}

/// Records where NPCs are; the latest `as_of` wins.
pub async fn record_locations(
    connection: &mut PgConnection,
    moves: &[(Uuid, String, DateTime<Utc>)],
) -> StoreResult<()> {
    if moves.is_empty() {
        return Ok(());
    }
    let mut sorted = moves.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)));
    sorted.dedup_by_key(|m| m.0);
    let npcs: Vec<Uuid> = sorted.iter().map(|m| m.0).collect();
    let rooms: Vec<String> = sorted.iter().map(|m| m.1.clone()).collect();
    let ats: Vec<DateTime<Utc>> = sorted.iter().map(|m| m.2).collect();
    sqlx::query(
        "INSERT INTO npc_locations (npc_id, room_id, as_of)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])
         ON CONFLICT (npc_id) DO UPDATE SET room_id = EXCLUDED.room_id, as_of = EXCLUDED.as_of, recorded_at = now()
             WHERE npc_locations.as_of <= EXCLUDED.as_of",
    )
    .bind(&npcs)
    .bind(&rooms)
    .bind(&ats)
    .execute(connection)
    .await?;
    Ok(())
}

/// One `world.npc_profile`.
#[derive(Debug, Clone)]
pub struct Profile {
    pub npc_id: Uuid,
    pub name: String,
    pub role: Option<String>,
    pub drives: Option<Drives>,
    pub mood: Option<(String, f64, Option<DateTime<Utc>>)>,
    pub as_of: DateTime<Utc>,
}

pub async fn record_profile(connection: &mut PgConnection, profile: &Profile) -> StoreResult<()> {
    let drives = profile.drives.map(
        |d| serde_json::json!({"social": d.social, "safety": d.safety, "loyalty": d.loyalty, "curiosity": d.curiosity}),
    );
    sqlx::query(
        "INSERT INTO npc_profiles (npc_id, name, role, drives, mood, mood_intensity, mood_expires_at, as_of)
         VALUES ($1, $2, $3, COALESCE($4, '{\"social\":0.5,\"safety\":0.5,\"loyalty\":0.5,\"curiosity\":0.5}'::jsonb),
                 $5, COALESCE($6, 0), $7, $8)
         ON CONFLICT (npc_id) DO UPDATE SET name = EXCLUDED.name, role = EXCLUDED.role,
             drives = COALESCE($4, npc_profiles.drives), mood = EXCLUDED.mood, mood_intensity = EXCLUDED.mood_intensity,
             mood_expires_at = EXCLUDED.mood_expires_at, as_of = EXCLUDED.as_of, recorded_at = now()
             WHERE npc_profiles.as_of <= EXCLUDED.as_of",
    )
    .bind(profile.npc_id)
    .bind(&profile.name)
    .bind(&profile.role)
    .bind(drives.map(sqlx::types::Json))
    .bind(profile.mood.as_ref().map(|m| m.0.clone()))
    .bind(profile.mood.as_ref().map(|m| m.1.clamp(0.0, 1.0)))
    .bind(profile.mood.as_ref().and_then(|m| m.2))
    .bind(profile.as_of)
    .execute(connection)
    .await?;
    Ok(())
}

/// Notified when the world the gossip leader holds changed: a location or profile written,
/// a fact learned from anything but gossip, a fact revised (migration 0013).
pub const WORLD_CHANGED_CHANNEL: &str = "npcmem_gossip_world";

/// What changed in the world since a refresh's `since`: where NPCs are, their drives,
/// and facts learned, revised or deleted.
#[derive(Debug)]
pub struct WorldChanges {
    /// The database time before which every write is visible now: the start of the oldest
    /// transaction still open in this database (rows take their timestamps, `now()`, from
    /// their transaction's start), or now. The next refresh loads rows stamped at or after
    /// it, so no late commit is missed and only the last interval's rows are reread.
    /// Transactions of other database roles are invisible here (run the services under
    /// one role, or grant the gossip role `pg_read_all_stats`).
    pub horizon: DateTime<Utc>,
    pub locations: Vec<(Uuid, String)>,
    pub drives: Vec<(Uuid, Drives)>,
    pub facts: Vec<ChangedFact>,
    /// Facts deleted since (none on a full load): apply these before `facts`, which may
    /// hold a fact learned again after its deletion.
    pub forgotten: Vec<ForgottenFact>,
}

/// A fact deleted from its holder (by the cap, or with a forgotten player).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForgottenFact {
    pub holder: Uuid,
    pub fact_id: Uuid,
    pub origin_fact_id: Uuid,
}

/// Loads [`WorldChanges`] written at or after `since` (database time), everything
/// without it: locations, drives, facts from conversations and the world (gossip's own
/// copies are in the leader's memory already), facts revised by a contradiction, and
/// facts deleted (migration 0015).
///
/// One round trip: five statements in one simple query, the horizon first, so each later
/// statement's snapshot sees every transaction that was open when the horizon was read.
/// The gossip leader runs it beside a tick's commit: one round trip took 1.9 ms there
/// against 2.4 ms for four prepared ones (means, bench gossip, before the deletion
/// log was added as the fifth; the tick itself
/// did not change beyond noise). Simple queries are planned each time and take no
/// parameters: the horizon reads `pg_stat_get_activity` (what the `pg_stat_activity`
/// view wraps; the view took 0.3 ms more to plan, pgbench) and `since` goes in as a
/// timestamp literal formatted here.
///
/// Sessions shown `idle` are left out of the horizon: they are in no transaction, but
/// while one reads a notification (every service LISTENs) Postgres shows it in one that
/// started with its last statement, perhaps an hour ago, and the next load would reread
/// every fact and deletion since. Autovacuum writes no rows a load reads.
pub async fn load_world_changes(
    connection: &mut PgConnection,
    since: Option<DateTime<Utc>>,
) -> StoreResult<WorldChanges> {
    use futures::TryStreamExt as _;
    use sqlx::{Either, FromRow as _, Row as _};

    let (recorded, facts, forgotten) = match since {
        Some(since) => {
            let at = format!("'{}'::timestamptz", since.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
            (
                format!("WHERE recorded_at >= {at}"),
                format!(
                    "WHERE (created_at >= {at} AND source <> 'gossip') OR (revised_at IS NOT NULL AND revised_at >= {at})"
                ),
                format!("WHERE forgotten_at >= {at}"),
            )
        }
        // A full load reads only the facts that exist.
        None => (String::new(), String::new(), "WHERE false".to_owned()),
    };
    let statements = format!(
        "SELECT LEAST(now(), COALESCE(min(s.xact_start), now())) FROM pg_stat_get_activity(NULL) AS s
         WHERE s.datid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND s.pid <> pg_backend_pid()
           AND s.state IS DISTINCT FROM 'idle' AND s.backend_type IS DISTINCT FROM 'autovacuum worker';
         SELECT npc_id, room_id FROM npc_locations {recorded};
         SELECT npc_id, drives FROM npc_profiles {recorded};
         SELECT npc_id, fact_id, origin_fact_id FROM knowledge_forgotten {forgotten};
         SELECT {STORED_FACT_COLUMNS}, superseded_by IS NOT NULL AS superseded FROM knowledge_facts {facts}"
    );
    let mut horizon = None;
    let (mut locations, mut drives, mut changed, mut deleted) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Each statement's rows come first, then its completion.
    let mut statement = 0;
    let mut results = sqlx::raw_sql(sqlx::AssertSqlSafe(statements)).fetch_many(connection);
    while let Some(result) = results.try_next().await? {
        let row = match result {
            Either::Left(_) => {
                statement += 1;
                continue;
            }
            Either::Right(row) => row,
        };
        match statement {
            0 => horizon = Some(row.try_get(0)?),
            1 => locations.push((row.try_get(0)?, row.try_get(1)?)),
            2 => drives.push((row.try_get(0)?, drives_from_json(&row.try_get::<sqlx::types::Json<_>, _>(1)?.0))),
            3 => deleted.push(ForgottenFact {
                holder: row.try_get(0)?,
                fact_id: row.try_get(1)?,
                origin_fact_id: row.try_get(2)?,
            }),
            _ => {
                let row = ChangedRow::from_row(&row)?;
                if let Some(fact) = row.fact.into_held() {
                    changed.push(ChangedFact { fact, superseded: row.superseded });
                }
            }
        }
    }
    let horizon = horizon.ok_or_else(|| sqlx::Error::RowNotFound)?;
    Ok(WorldChanges { horizon, locations, drives, facts: changed, forgotten: deleted })
}

/// Drives as stored (`npc_profiles.drives`); a missing or odd drive is the neutral 0.5.
fn drives_from_json(drives: &serde_json::Value) -> Drives {
    let get = |name: &str| drives.get(name).and_then(serde_json::Value::as_f64).unwrap_or(0.5).clamp(0.0, 1.0);
    Drives { social: get("social"), safety: get("safety"), loyalty: get("loyalty"), curiosity: get("curiosity") }
}
