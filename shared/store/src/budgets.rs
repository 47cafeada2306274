//! Shared LLM budgets (table `token_budget_usage` and `request_rate`).
//!
//! Every statement here is one atomic check-and-add on a locked row, so two replicas
//! racing for the last tokens cannot both win: `reserved` never passes the limit the
//! statement was given.

use chrono::{DateTime, DurationRound, NaiveDate, TimeDelta, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// `request_rate.kind` of LLM extractions (`NPCMEM_MEMORY_EXTRACTION_RPM`).
pub const EXTRACTION_RATE: &str = "extraction";
/// `request_rate.kind` of LLM consolidations (`NPCMEM_MEMORY_CONSOLIDATION_RPM`).
pub const CONSOLIDATION_RATE: &str = "consolidation";

/// Leases up to `want` tokens of `day`'s global budget — all of them, or what is left if
/// that is at least `need`; returns the grant (0: not even `need` is left).
pub async fn lease_global(
    connection: &mut PgConnection,
    day: NaiveDate,
    want: i64,
    need: i64,
    limit: i64,
) -> StoreResult<i64> {
    let granted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO token_budget_usage AS t (day, scope, reserved, last_grant)
         SELECT $1, 'global', LEAST($2, $4), LEAST($2, $4) WHERE $3 <= $4
         ON CONFLICT (day, scope, npc_id) DO UPDATE
             SET reserved = t.reserved + LEAST($2, $4 - t.reserved),
                 last_grant = LEAST($2, $4 - t.reserved),
                 updated_at = now()
             WHERE t.reserved + $3 <= $4
         RETURNING last_grant",
    )
    .bind(day)
    .bind(want)
    .bind(need)
    .bind(limit)
    .fetch_optional(connection)
    .await?;
    Ok(granted.unwrap_or(0))
}

/// Ends (part of) a lease: `unused` tokens go back to `day`'s global budget, and what
/// the replica spent from it is recorded.
pub async fn release_global(
    connection: &mut PgConnection,
    day: NaiveDate,
    unused: i64,
    spent: i64,
    calls: i64,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE token_budget_usage
         SET reserved = GREATEST(0, reserved - $2), spent = spent + $3, calls = calls + $4, updated_at = now()
         WHERE day = $1 AND scope = 'global' AND npc_id = '00000000-0000-0000-0000-000000000000'",
    )
    .bind(day)
    .bind(unused.max(0))
    .bind(spent.max(0))
    .bind(calls.max(0))
    .execute(connection)
    .await?;
    Ok(())
}

/// Reserves `amount` tokens of `day`'s per-NPC budget for each `(npc_id, amount)` whose
/// NPC still has that much left; returns the NPCs that got their reservation. Each NPC
/// may appear once.
pub async fn reserve_npcs(
    connection: &mut PgConnection,
    day: NaiveDate,
    requests: &[(Uuid, i64)],
    limit: i64,
) -> StoreResult<Vec<Uuid>> {
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let mut sorted = requests.to_vec();
    // One lock order for every replica, so two batches sharing NPCs cannot deadlock.
    sorted.sort_unstable();
    let (npc_ids, amounts): (Vec<Uuid>, Vec<i64>) = sorted.into_iter().unzip();
    let granted = sqlx::query_scalar(
        "INSERT INTO token_budget_usage AS t (day, scope, npc_id, reserved)
         SELECT $1, 'npc', r.npc_id, r.amount
         FROM unnest($2::uuid[], $3::int8[]) AS r(npc_id, amount)
         WHERE r.amount <= $4
         ORDER BY r.npc_id
         ON CONFLICT (day, scope, npc_id) DO UPDATE
             SET reserved = t.reserved + EXCLUDED.reserved, updated_at = now()
             WHERE t.reserved + EXCLUDED.reserved <= $4
         RETURNING npc_id",
    )
    .bind(day)
    .bind(&npc_ids)
    .bind(&amounts)
    .bind(limit)
    .fetch_all(connection)
    .await?;
    Ok(granted)
}

/// One NPC's settled calls: `reserved` tokens are replaced by the `charged` ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpcSettlement {
    pub npc_id: Uuid,
    pub reserved: i64,
    pub charged: i64,
    pub calls: i64,
}

/// Replaces reservations by what the calls really cost. Each NPC may appear once.
pub async fn settle_npcs(
    connection: &mut PgConnection,
    day: NaiveDate,
    settlements: &[NpcSettlement],
) -> StoreResult<()> {
    if settlements.is_empty() {
        return Ok(());
    }
    let mut sorted = settlements.to_vec();
    sorted.sort_unstable_by_key(|settlement| settlement.npc_id);
    let npc_ids: Vec<Uuid> = sorted.iter().map(|s| s.npc_id).collect();
    let reserved: Vec<i64> = sorted.iter().map(|s| s.reserved).collect();
    let charged: Vec<i64> = sorted.iter().map(|s| s.charged).collect();
    let calls: Vec<i64> = sorted.iter().map(|s| s.calls).collect();
    sqlx::query(
        "UPDATE token_budget_usage AS t
         SET reserved = GREATEST(0, t.reserved - s.reserved + s.charged),
             spent = t.spent + s.charged, calls = t.calls + s.calls, updated_at = now()
         FROM unnest($2::uuid[], $3::int8[], $4::int8[], $5::int8[]) AS s(npc_id, reserved, charged, calls)
         WHERE t.day = $1 AND t.scope = 'npc' AND t.npc_id = s.npc_id",
    )
    .bind(day)
    .bind(&npc_ids)
    .bind(&reserved)
    .bind(&charged)
    .bind(&calls)
    .execute(connection)
    .await?;
    Ok(())
}

/// Grants up to `wanted` requests of `kind` at `now` under `per_minute`, on a sliding
/// minute: the current window's count plus the previous window's, weighted by how much
/// of it still lies within the last 60 s (the original design keeps exact timestamps; this needs
/// one row per minute instead).
pub async fn grant_requests(
    connection: &mut PgConnection,
    kind: &str,
    now: DateTime<Utc>,
    wanted: i64,
    per_minute: i64,
) -> StoreResult<i64> {
    if wanted <= 0 {
        return Ok(0);
    }
    let minute = TimeDelta::minutes(1);
    let window_start = now.duration_trunc(minute).unwrap_or(now);
    let elapsed = (now - window_start).num_milliseconds() as f64 / 60_000.0;
    let previous_weight = (1.0 - elapsed).clamp(0.0, 1.0);
    let (granted, opened): (i32, bool) = sqlx::query_as(
        "WITH previous AS (
             SELECT COALESCE(max(used), 0) * $5::float8 AS carried
             FROM request_rate WHERE kind = $1 AND window_start = $2 - interval '1 minute'
         )
         INSERT INTO request_rate AS r (kind, window_start, used, last_grant)
         SELECT $1, $2, g, g FROM previous,
             LATERAL (SELECT GREATEST(0, LEAST($3, floor($4 - carried)::int)) AS g) AS grant_now
         ON CONFLICT (kind, window_start) DO UPDATE
             SET used = r.used + GREATEST(0, LEAST($3, floor($4 - (SELECT carried FROM previous))::int - r.used)),
                 last_grant = GREATEST(0, LEAST($3, floor($4 - (SELECT carried FROM previous))::int - r.used))
         RETURNING last_grant, (xmax = 0) AS opened",
    )
    .bind(kind)
    .bind(window_start)
    .bind(wanted.min(i32::MAX as i64) as i32)
    .bind(per_minute as f64)
    .bind(previous_weight)
    .fetch_one(&mut *connection)
    .await?;
    if opened {
        // A new window: the ones before the previous are no longer read.
        sqlx::query("DELETE FROM request_rate WHERE kind = $1 AND window_start < $2 - interval '5 minutes'")
            .bind(kind)
            .bind(window_start)
            .execute(connection)
            .await?;
    }
    Ok(i64::from(granted))
}

/// One row of `token_budget_usage`, for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BudgetUsage {
    pub scope: String,
    pub npc_id: Uuid,
    pub reserved: i64,
    pub spent: i64,
    pub calls: i64,
}

/// `day`'s rows, the global one first.
pub async fn usage(connection: &mut PgConnection, day: NaiveDate) -> StoreResult<Vec<BudgetUsage>> {
    let rows = sqlx::query_as(
        "SELECT scope, npc_id, reserved, spent, calls FROM token_budget_usage WHERE day = $1
         ORDER BY scope = 'global' DESC, npc_id",
    )
    .bind(day)
    .fetch_all(connection)
    .await?;
    Ok(rows)
}
