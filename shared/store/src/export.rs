//! Export and import of whole NPCs or the whole world as rows of
//! the tables that hold game state, each row as Postgres' own `to_jsonb` of it, so an
//! import reproduces the row exactly (`jsonb_populate_recordset` on the same table type).
//! Operational tables (outbox, budgets, rate counters, job runs, admin actions, switches)
//! are not game state and stay behind.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::StoreResult;

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    World,
    Npcs(Vec<Uuid>),
}

/// A table in the export, in import order (a row's references come before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub name: &'static str,
    /// The column naming the NPC, for NPC exports; `None`: world-level only.
    npc_column: Option<&'static str>,
    /// Sort order, so two exports of the same data are the same file.
    order_by: &'static str,
    /// The serial sequence to move past imported ids.
    serial: Option<&'static str>,
}

pub const TABLES: &[Table] = &[
    Table { name: "factions", npc_column: None, order_by: "faction", serial: None },
    Table { name: "faction_attitudes", npc_column: None, order_by: "faction, toward", serial: None },
    Table { name: "npc_factions", npc_column: Some("npc_id"), order_by: "npc_id", serial: None },
    Table { name: "player_factions", npc_column: None, order_by: "player_id", serial: None },
    Table { name: "player_privacy", npc_column: None, order_by: "player_id", serial: None },
    Table { name: "faction_reputation", npc_column: None, order_by: "faction, player_id", serial: None },
    Table { name: "npc_profiles", npc_column: Some("npc_id"), order_by: "npc_id", serial: None },
    Table { name: "npc_locations", npc_column: Some("npc_id"), order_by: "npc_id", serial: None },
    Table { name: "conversations", npc_column: Some("npc_id"), order_by: "conversation_id", serial: None },
    Table { name: "working_memory", npc_column: Some("npc_id"), order_by: "conversation_id", serial: None },
    Table { name: "memories", npc_column: Some("npc_id"), order_by: "id", serial: None },
    Table { name: "memory_audit", npc_column: Some("npc_id"), order_by: "id", serial: Some("id") },
    Table { name: "relationships", npc_column: Some("npc_id"), order_by: "npc_id, player_id", serial: None },
    Table { name: "applied_conversations", npc_column: Some("npc_id"), order_by: "conversation_id", serial: None },
    Table { name: "knowledge_facts", npc_column: Some("npc_id"), order_by: "id", serial: None },
];

pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|table| table.name == name)
}

impl Table {
    /// Whether this table is part of an export of `scope`.
    pub fn in_scope(&self, scope: &Scope) -> bool {
        matches!(scope, Scope::World) || self.npc_column.is_some()
    }

    fn filter(&self, scope: &Scope) -> String {
        match (scope, self.npc_column) {
            (Scope::Npcs(_), Some(column)) => format!("WHERE {column} = ANY($1)"),
            _ => "WHERE $1::uuid[] IS NOT NULL".to_owned(),
        }
    }

    fn npc_ids(scope: &Scope) -> Vec<Uuid> {
        match scope {
            Scope::World => Vec::new(),
            Scope::Npcs(ids) => ids.clone(),
        }
    }

    /// Rows this table holds in `scope`.
    pub async fn count(&self, connection: &mut PgConnection, scope: &Scope) -> StoreResult<i64> {
        let statement = format!("SELECT count(*) FROM {} {}", self.name, self.filter(scope));
        let count =
            sqlx::query_scalar(sqlx::AssertSqlSafe(statement)).bind(Self::npc_ids(scope)).fetch_one(connection).await?;
        Ok(count)
    }

    /// The rows in `scope` as JSON text, in a stable order, streamed (a world export does
    /// not have to fit in memory).
    pub fn rows<'c>(
        &self,
        connection: &'c mut PgConnection,
        scope: &Scope,
    ) -> futures::stream::BoxStream<'c, StoreResult<String>> {
        use futures::StreamExt as _;
        let statement = format!(
            "SELECT to_jsonb(t)::text FROM {} AS t {} ORDER BY {}",
            self.name,
            self.filter(scope),
            self.order_by
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
            .bind(Self::npc_ids(scope))
            .fetch(connection)
            .map(|row| row.map_err(Into::into))
            .boxed()
    }

    /// Inserts rows (each the JSON of a row of this table) that are not there yet; a row
    /// whose key exists is left as it is, so importing the same rows twice changes nothing.
    /// Returns the rows inserted.
    pub async fn import(&self, connection: &mut PgConnection, rows: &[serde_json::Value]) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let statement = format!(
            "INSERT INTO {name} SELECT * FROM jsonb_populate_recordset(NULL::{name}, $1) ON CONFLICT DO NOTHING",
            name = self.name
        );
        let inserted = sqlx::query(sqlx::AssertSqlSafe(statement))
            .bind(sqlx::types::Json(rows))
            .execute(&mut *connection)
            .await?
            .rows_affected();
        if let Some(column) = self.serial {
            let statement = format!(
                "SELECT setval(pg_get_serial_sequence('{name}', '{column}'),
                               GREATEST((SELECT max({column}) FROM {name}), 1))",
                name = self.name
            );
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut *connection).await?;
        }
        Ok(inserted)
    }
}
