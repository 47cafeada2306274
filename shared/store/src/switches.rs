//! Runtime switches (DESIGN §3): degraded mode, gossip and consolidation on/off.

use std::collections::HashMap;

use sqlx::PgConnection;

use crate::error::StoreResult;

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
