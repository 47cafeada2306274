//! Runtime switches: degraded mode, gossip and consolidation on/off.
//!
//! `degraded` is `"auto"` (the default: degraded while any service instance reports a
//! breached error budget, see [`crate::error_budgets`]) or a boolean an operator set,
//! which overrides the budgets either way.

use std::collections::HashMap;

use sqlx::PgConnection;

use crate::error::StoreResult;

/// The switches services act on, with their defaults when a row is missing or not a boolean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// Degraded mode: gossip and consolidation stop, enrich keeps
    /// cached contexts three times as long.
    pub degraded: bool,
    /// What an operator set `degraded` to; None while it follows the error budgets.
    pub degraded_set: Option<bool>,
    pub gossip_enabled: bool,
    pub consolidation_enabled: bool,
}

impl Default for Switches {
    fn default() -> Self {
        Switches { degraded: false, degraded_set: None, gossip_enabled: true, consolidation_enabled: true }
    }
}

impl Switches {
    pub fn gossip_runs(&self) -> bool {
        self.gossip_enabled && !self.degraded
    }

    pub fn consolidation_runs(&self) -> bool {
        self.consolidation_enabled && !self.degraded
    }
}

/// Reads [`Switches`] from `runtime_switches`.
pub async fn read(connection: &mut PgConnection) -> StoreResult<Switches> {
    let values = load_all(connection).await?;
    let defaults = Switches::default();
    let flag = |name: &str, default: bool| values.get(name).and_then(serde_json::Value::as_bool).unwrap_or(default);
    // Anything but a boolean ("auto", or no row) follows the error budgets.
    let degraded_set = values.get("degraded").and_then(serde_json::Value::as_bool);
    let degraded = match degraded_set {
        Some(set) => set,
        None => crate::error_budgets::any_breached(connection).await?,
    };
    Ok(Switches {
        degraded,
        degraded_set,
        gossip_enabled: flag("gossip_enabled", defaults.gossip_enabled),
        consolidation_enabled: flag("consolidation_enabled", defaults.consolidation_enabled),
    })
}

pub async fn load_all(connection: &mut PgConnection) -> StoreResult<HashMap<String, serde_json::Value>> {
    let rows: Vec<(String, sqlx::types::Json<serde_json::Value>)> =
        sqlx::query_as("SELECT switch, value FROM runtime_switches").fetch_all(connection).await?;
    Ok(rows.into_iter().map(|(switch, value)| (switch, value.0)).collect())
}

/// A switch as stored, for listing.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SwitchRow {
    pub switch: String,
    pub value: sqlx::types::Json<serde_json::Value>,
    pub updated_by: String,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

pub async fn list(connection: &mut PgConnection) -> StoreResult<Vec<SwitchRow>> {
    let rows = sqlx::query_as("SELECT switch, value, updated_by, updated_at FROM runtime_switches ORDER BY switch")
        .fetch_all(connection)
        .await?;
    Ok(rows)
}

pub async fn set(
    connection: &mut PgConnection,
    switch: &str,
    value: &serde_json::Value,
    updated_by: &str,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO runtime_switches (switch, value, updated_by) VALUES ($1, $2, $3)
         ON CONFLICT (switch) DO UPDATE
             SET value = EXCLUDED.value, updated_by = EXCLUDED.updated_by, updated_at = now()",
    )
    .bind(switch)
    .bind(sqlx::types::Json(value))
    .bind(updated_by)
    .execute(connection)
    .await?;
    Ok(())
}
