//! Error-budget checks as each service instance last reported them (table
//! `error_budget_checks`): what automatic degraded mode reads.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::error::StoreResult;

/// One instance's verdict on one check, valid until `expires_at`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CheckRow {
    pub instance: String,
    pub service: String,
    pub check_name: String,
    /// The last window's measurement; None when the window had too few samples to judge.
    pub value: Option<f64>,
    pub breached: bool,
    /// When `breached` last changed.
    pub since: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Writes (or refreshes) an instance's check.
pub async fn report(connection: &mut PgConnection, row: &CheckRow) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO error_budget_checks (instance, service, check_name, value, breached, since, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (instance, check_name) DO UPDATE
             SET value = EXCLUDED.value, breached = EXCLUDED.breached, since = EXCLUDED.since,
                 expires_at = EXCLUDED.expires_at",
    )
    .bind(&row.instance)
    .bind(&row.service)
    .bind(&row.check_name)
    .bind(row.value)
    .bind(row.breached)
    .bind(row.since)
    .bind(row.expires_at)
    .execute(connection)
    .await?;
    Ok(())
}

/// An instance stopping takes its checks with it.
pub async fn forget_instance(connection: &mut PgConnection, instance: &str) -> StoreResult<()> {
    sqlx::query("DELETE FROM error_budget_checks WHERE instance = $1").bind(instance).execute(connection).await?;
    Ok(())
}

/// Every unexpired check, breached ones first: `npcmem switch list` shows them.
pub async fn current(connection: &mut PgConnection) -> StoreResult<Vec<CheckRow>> {
    let rows = sqlx::query_as(
        "SELECT instance, service, check_name, value, breached, since, expires_at FROM error_budget_checks
          WHERE expires_at > now() ORDER BY breached DESC, service, check_name, instance",
    )
    .fetch_all(connection)
    .await?;
    Ok(rows)
}

/// Whether any instance reports a breached check that has not expired.
pub async fn any_breached(connection: &mut PgConnection) -> StoreResult<bool> {
    let breached =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM error_budget_checks WHERE breached AND expires_at > now())")
            .fetch_one(connection)
            .await?;
    Ok(breached)
}
