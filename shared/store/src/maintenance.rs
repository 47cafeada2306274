//! The consolidate service's SQL: salience decay and cap pruning as set-based
//! statements over slices of the table, consolidation of episodic clusters, procedural
//! reinforcement, and the job-run ledger with its leader lock.

use chrono::{DateTime, Utc};
use npcmem_core::consolidation::{Episode, Summary, procedural_content, procedural_pattern};
use npcmem_core::memory::{
    ACCESS_BOOST_CAP, ACCESS_BOOST_FACTOR, EMOTIONAL_RECENCY_WEIGHT, MEMORY_CAPS, MemoryType, RECENCY_DAYS,
};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// `compute_salience` of npcmem-core in SQL, rounded to 3 decimals, at the time in
/// parameter `now` (e.g. `$1`), over the columns of table alias `row` (e.g. `m.`, or
/// `""` for none).
fn salience_sql(now: &str, row: &str) -> String {
    format!(
        "round(LEAST({row}importance
             * exp(-GREATEST(extract(epoch FROM ({now}::timestamptz - {row}last_accessed)) / 86400.0, 0)
                   / ({RECENCY_DAYS} * (1 + {EMOTIONAL_RECENCY_WEIGHT} * {row}emotional_intensity)))
             * LEAST(1 + ln(1 + GREATEST({row}access_count, 0)) * {ACCESS_BOOST_FACTOR}, {ACCESS_BOOST_CAP}),
           1.0)::numeric, 3)::float8"
    )
}

/// Heap pages of `memories`, for slicing the decay pass.
pub async fn memory_pages(connection: &mut PgConnection) -> StoreResult<i64> {
    let pages: i64 = sqlx::query_scalar("SELECT (pg_relation_size('memories') / current_setting('block_size')::int8)")
        .fetch_one(connection)
        .await?;
    Ok(pages)
}

/// Recomputes the salience of the unlocked memories stored in heap pages
/// `[first_page, end_page)` at `now`, writing only values that changed; returns the rows
/// written. Rows moved past `end_page` by this pass already hold the new value.
pub async fn decay_pages(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    first_page: i64,
    end_page: i64,
) -> StoreResult<u64> {
    let salience = salience_sql("$1", "");
    let statement = format!(
        "UPDATE memories SET salience = {salience}
         WHERE ctid >= format('(%s,0)', $2::int8)::tid AND ctid < format('(%s,0)', $3::int8)::tid
           AND NOT locked AND salience IS DISTINCT FROM {salience}"
    );
    let result = sqlx::query(sqlx::AssertSqlSafe(statement))
        .bind(now)
        .bind(first_page)
        .bind(end_page)
        .execute(connection)
        .await?;
    Ok(result.rows_affected())
}

/// Deletes, for every pair whose NPC id falls in `[low, high]`, the memories of
/// `memory_type` beyond its cap, in the original design's eviction order (episodic: lowest salience
/// at `now` — computed here, so pruning can run before the rescoring pass and spare it
/// the rows it deletes —, semantic: lowest confidence, procedural: lowest reinforcement
/// count; oldest first on ties), locked ones exempt but counted; returns the rows deleted.
pub async fn prune_slice(
    connection: &mut PgConnection,
    memory_type: MemoryType,
    low: Uuid,
    high: Uuid,
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let eviction_order = match memory_type {
        MemoryType::Episodic => format!("{} ASC", salience_sql("$5", "m.")),
        MemoryType::Semantic => "m.confidence ASC".to_owned(),
        MemoryType::Procedural => "m.reinforcement_count ASC".to_owned(),
    };
    let statement = format!(
        "WITH over AS (
             SELECT npc_id, player_id, count(*) AS total FROM memories
             WHERE memory_type = $1 AND npc_id BETWEEN $2 AND $3
             GROUP BY npc_id, player_id HAVING count(*) > $4
         ),
         ranked AS (
             SELECT m.id, over.total,
                    row_number() OVER (PARTITION BY m.npc_id, m.player_id
                                       ORDER BY {eviction_order}, m.created_at ASC, m.id) AS rank
             FROM memories m JOIN over ON m.npc_id = over.npc_id AND m.player_id IS NOT DISTINCT FROM over.player_id
             WHERE m.memory_type = $1 AND NOT m.locked AND $5::timestamptz IS NOT NULL
         )
         DELETE FROM memories WHERE id IN (SELECT id FROM ranked WHERE rank <= total - $4)"
    );
    let result = sqlx::query(sqlx::AssertSqlSafe(statement))
        .bind(memory_type.as_str())
        .bind(low)
        .bind(high)
        .bind(MEMORY_CAPS.for_type(memory_type) as i64)
        .bind(now)
        .execute(connection)
        .await?;
    Ok(result.rows_affected())
}

/// Pairs with at least `min_cluster` episodic memories created before `cutoff` that share
/// a tag: the consolidation backlog.
pub async fn consolidation_candidates(
    connection: &mut PgConnection,
    cutoff: DateTime<Utc>,
    min_cluster: i64,
) -> StoreResult<Vec<(Uuid, Uuid)>> {
    let pairs = sqlx::query_as(
        "SELECT DISTINCT npc_id, player_id FROM (
             SELECT npc_id, player_id, unnest(tags) AS tag FROM memories
             WHERE memory_type = 'episodic' AND created_at < $1 AND player_id IS NOT NULL
         ) AS tagged
         GROUP BY npc_id, player_id, tag HAVING count(*) >= $2
         ORDER BY npc_id, player_id",
    )
    .bind(cutoff)
    .bind(min_cluster)
    .fetch_all(connection)
    .await?;
    Ok(pairs)
}

/// A pair's episodic memories created before `cutoff` (call with the pair locked).
pub async fn old_episodes(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
    cutoff: DateTime<Utc>,
) -> StoreResult<Vec<Episode>> {
    let rows: Vec<(Uuid, String, Vec<String>, f64, bool)> = sqlx::query_as(
        "SELECT id, content, tags, importance, locked FROM memories
         WHERE npc_id = $1 AND player_id = $2 AND memory_type = 'episodic' AND created_at < $3
           AND safety_flag <> 'suspect'
         ORDER BY created_at, id",
    )
    .bind(npc_id)
    .bind(player_id)
    .bind(cutoff)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, content, tags, importance, locked)| Episode { id, content, tags, importance, locked })
        .collect())
}

/// Stores a consolidated semantic memory and deletes its unlocked source episodes;
/// returns (the new memory's id, sources deleted).
pub async fn store_consolidation(
    connection: &mut PgConnection,
    npc_id: Uuid,
    player_id: Uuid,
    summary: &Summary,
    sources: &[Episode],
    extractor: &str,
    now: DateTime<Utc>,
) -> StoreResult<(Uuid, u64)> {
    let id = Uuid::new_v4();
    let importance = sources.iter().map(|e| e.importance).fold(0.0_f64, f64::max);
    let source_ids: Vec<Uuid> = sources.iter().map(|e| e.id).collect();
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                               source_episodes, extractor, created_at, last_accessed)
         VALUES ($1, $2, $3, 'semantic', $4, $5, $6, $7, $6, $8, $9, $10, $10)",
    )
    .bind(id)
    .bind(npc_id)
    .bind(player_id)
    .bind(&summary.content)
    .bind(&summary.tags)
    .bind(importance)
    .bind(summary.confidence)
    .bind(&source_ids)
    .bind(extractor)
    .bind(now)
    .execute(&mut *connection)
    .await?;
    let deleted = sqlx::query("DELETE FROM memories WHERE id = ANY($1) AND NOT locked")
        .bind(&source_ids)
        .execute(connection)
        .await?
        .rows_affected();
    Ok((id, deleted))
}

/// A tag pattern that recurred in a pair's conversations.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub tags: Vec<String>,
    pub conversations: i64,
    pub importance: f64,
    pub last_seen: DateTime<Utc>,
}

/// Tag patterns (an episodic memory's sorted tags) seen in at least `min_conversations`
/// distinct conversations of a pair whose NPC id falls in `[low, high]`.
pub async fn recurring_patterns(
    connection: &mut PgConnection,
    low: Uuid,
    high: Uuid,
    min_conversations: i64,
) -> StoreResult<Vec<Pattern>> {
    type Row = (Uuid, Uuid, Vec<String>, i64, f64, DateTime<Utc>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT npc_id, player_id, pattern, count(DISTINCT source_conversation_id), max(importance), max(created_at)
         FROM (SELECT npc_id, player_id, source_conversation_id, importance, created_at,
                      ARRAY(SELECT t FROM unnest(tags) AS t ORDER BY t) AS pattern
               FROM memories
               WHERE memory_type = 'episodic' AND npc_id BETWEEN $1 AND $2 AND player_id IS NOT NULL
                 AND tags <> '{}' AND source_conversation_id IS NOT NULL AND safety_flag <> 'suspect') AS m
         GROUP BY npc_id, player_id, pattern
         HAVING count(DISTINCT source_conversation_id) >= $3",
    )
    .bind(low)
    .bind(high)
    .bind(min_conversations)
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(npc_id, player_id, tags, conversations, importance, last_seen)| Pattern {
            npc_id,
            player_id,
            tags,
            conversations,
            importance,
            last_seen,
        })
        .collect())
}

/// Creates the pattern's procedural memory, or adds the conversations seen since its
/// last reinforcement to `reinforcement_count`; returns whether anything changed. Run
/// twice over the same memories, it changes nothing the second time.
pub async fn reinforce(connection: &mut PgConnection, pattern: &Pattern, now: DateTime<Utc>) -> StoreResult<bool> {
    let key = procedural_pattern(&pattern.tags);
    let existing: Option<(Uuid, Option<String>)> = sqlx::query_as(
        "SELECT id, trigger_context->>'last_seen' FROM memories
         WHERE npc_id = $1 AND player_id = $2 AND memory_type = 'procedural' AND pattern = $3
         ORDER BY created_at LIMIT 1 FOR UPDATE",
    )
    .bind(pattern.npc_id)
    .bind(pattern.player_id)
    .bind(&key)
    .fetch_optional(&mut *connection)
    .await?;
    let confidence = (0.5 + 0.05 * pattern.conversations as f64).min(0.95);
    let context = serde_json::json!({"tags": pattern.tags, "last_seen": pattern.last_seen.to_rfc3339()});
    match existing {
        None => {
            sqlx::query(
                "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence,
                                       salience, pattern, trigger_context, reinforcement_count, extractor,
                                       created_at, last_accessed)
                 VALUES ($1, $2, $3, 'procedural', $4, $5, $6, $7, $6, $8, $9, $10, 'consolidation', $11, $11)",
            )
            .bind(Uuid::new_v4())
            .bind(pattern.npc_id)
            .bind(pattern.player_id)
            .bind(procedural_content(&pattern.tags))
            .bind(&pattern.tags)
            .bind(pattern.importance.clamp(0.0, 1.0))
            .bind(npcmem_core::memory::round3(confidence))
            .bind(&key)
            .bind(sqlx::types::Json(&context))
            .bind(pattern.conversations as i32)
            .bind(now)
            .execute(connection)
            .await?;
            Ok(true)
        }
        Some((id, last_seen)) => {
            let since = last_seen
                .and_then(|text| DateTime::parse_from_rfc3339(&text).ok())
                .map(|at| at.with_timezone(&Utc))
                .unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
            let new: i64 = sqlx::query_scalar(
                "SELECT count(DISTINCT source_conversation_id) FROM memories
                 WHERE npc_id = $1 AND player_id = $2 AND memory_type = 'episodic' AND created_at > $3
                   AND ARRAY(SELECT t FROM unnest(tags) AS t ORDER BY t) = $4 AND source_conversation_id IS NOT NULL",
            )
            .bind(pattern.npc_id)
            .bind(pattern.player_id)
            .bind(since)
            .bind(&pattern.tags)
            .fetch_one(&mut *connection)
            .await?;
            if new == 0 {
                return Ok(false);
            }
            sqlx::query(
                "UPDATE memories SET reinforcement_count = reinforcement_count + $2, trigger_context = $3,
                        confidence = GREATEST(confidence, $4), last_accessed = $5
                 WHERE id = $1",
            )
            .bind(id)
            .bind(new as i32)
            .bind(sqlx::types::Json(&context))
            .bind(npcmem_core::memory::round3(confidence))
            .bind(now)
            .execute(connection)
            .await?;
            Ok(true)
        }
    }
}

/// The `count` slices `[low, high]` of the UUID space the set-based passes work through.
pub fn uuid_slices(count: u32) -> Vec<(Uuid, Uuid)> {
    let count = u128::from(count.max(1));
    let width = u128::MAX / count;
    (0..count)
        .map(|i| {
            let low = i * width + if i == 0 { 0 } else { 1 };
            let high = if i + 1 == count { u128::MAX } else { (i + 1) * width };
            (Uuid::from_u128(low), Uuid::from_u128(high))
        })
        .collect()
}

/// Takes the job's leader lock on this session (released by [`unlock_job`] or when the
/// session ends, so a dead leader's lock frees itself); false when another holds it.
pub async fn try_lock_job(connection: &mut PgConnection, job: &str) -> StoreResult<bool> {
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext('npcmem.job'), hashtext($1))")
        .bind(job)
        .fetch_one(connection)
        .await?;
    Ok(locked)
}

pub async fn unlock_job(connection: &mut PgConnection, job: &str) -> StoreResult<()> {
    sqlx::query("SELECT pg_advisory_unlock(hashtext('npcmem.job'), hashtext($1))")
        .bind(job)
        .execute(connection)
        .await?;
    Ok(())
}

/// Whether the job's `tick` has finished already.
pub async fn tick_finished(connection: &mut PgConnection, job: &str, tick: DateTime<Utc>) -> StoreResult<bool> {
    let finished: Option<Option<DateTime<Utc>>> =
        sqlx::query_scalar("SELECT finished_at FROM job_runs WHERE job = $1 AND tick = $2")
            .bind(job)
            .bind(tick)
            .fetch_optional(connection)
            .await?;
    Ok(matches!(finished, Some(Some(_))))
}

/// Records that `runner` started the job's `tick` (again, after a crashed attempt).
pub async fn start_tick(
    connection: &mut PgConnection,
    job: &str,
    tick: DateTime<Utc>,
    runner: &str,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO job_runs (job, tick, runner) VALUES ($1, $2, $3)
         ON CONFLICT (job, tick) DO UPDATE
             SET runner = EXCLUDED.runner, started_at = now(), attempts = job_runs.attempts + 1",
    )
    .bind(job)
    .bind(tick)
    .bind(runner)
    .execute(connection)
    .await?;
    Ok(())
}

pub async fn finish_tick(
    connection: &mut PgConnection,
    job: &str,
    tick: DateTime<Utc>,
    outcome: &serde_json::Value,
) -> StoreResult<()> {
    sqlx::query("UPDATE job_runs SET finished_at = now(), outcome = $3 WHERE job = $1 AND tick = $2")
        .bind(job)
        .bind(tick)
        .bind(sqlx::types::Json(outcome))
        .execute(connection)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_uuid_space_without_overlap() {
        let slices = uuid_slices(4);
        assert_eq!(slices[0].0, Uuid::nil());
        assert_eq!(slices[3].1, Uuid::max());
        for window in slices.windows(2) {
            assert_eq!(window[0].1.as_u128() + 1, window[1].0.as_u128());
        }
    }
}
