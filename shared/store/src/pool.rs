//! Connecting, migrating, and creating databases.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::error::{StoreError, StoreResult};

#[derive(Debug, Clone)]
pub struct PoolOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self { max_connections: 8, acquire_timeout: Duration::from_secs(5) }
    }
}

/// Opens a pool. Connections are made lazily and re-made after a failure, so a pool
/// survives Postgres restarting underneath it.
pub async fn connect(database_url: &str, options: &PoolOptions) -> StoreResult<PgPool> {
    let connect_options: PgConnectOptions = database_url.parse().map_err(StoreError::Other)?;
    let connect_options = connect_options
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_millis(500));
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(connect_options)
        .await?;
    Ok(pool)
}

pub async fn migrate(pool: &PgPool) -> StoreResult<()> {
    // Embedded from `migrations/`; the migrator takes an advisory lock, so several
    // services starting at once apply them exactly once.
    let mut migrator = sqlx::migrate!("../../migrations");
    // During a rolling upgrade a replica of the older release must keep starting after a
    // newer one migrated further: migrations only ever add, so unknown ones are fine.
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    Ok(())
}

/// Creates `database_name` through the admin connection `admin_url` unless it exists.
/// Used by `deploy/local/up` and the test harness.
pub async fn ensure_database(admin_url: &str, database_name: &str) -> StoreResult<()> {
    debug_assert!(
        database_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database names are generated, never user input"
    );
    let mut connection = PgConnection::connect(admin_url).await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(database_name)
        .fetch_optional(&mut connection)
        .await?;
    if exists.is_none() {
        let create = format!("CREATE DATABASE \"{database_name}\"");
        match sqlx::query(sqlx::AssertSqlSafe(create)).execute(&mut connection).await {
            Ok(_) => {}
            // 42P04 duplicate_database: another process won the race
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42P04") => {}
            Err(error) => return Err(error.into()),
        }
    }
    connection.close().await?;
    Ok(())
}

/// Drops `database_name`, disconnecting its sessions first. For test clean-up.
pub async fn drop_database(admin_url: &str, database_name: &str) -> StoreResult<()> {
    let mut connection = PgConnection::connect(admin_url).await?;
    let drop = format!("DROP DATABASE IF EXISTS \"{database_name}\" WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&mut connection).await?;
    connection.close().await?;
    Ok(())
}
