//! Connecting to Postgres and NATS for one command, each attempt bounded by
//! `--connect-timeout-secs` so an unreachable server fails the command in seconds
//! instead of hanging (exit code 4).

use std::time::Duration;

use async_nats::jetstream;
use npcmem_bus::Topology;
use npcmem_service::CommonConfig;
use npcmem_store::{PgConnection, PgPool, PoolOptions, StoreError};
use sqlx::Connection;

use crate::error::CliError;

/// A command needs one or two connections at a time.
const CLI_POOL_CONNECTIONS: u32 = 2;

/// Postgres with the migrations applied (the CLI writes `admin_actions`, migration 0010).
pub async fn postgres(common: &CommonConfig, timeout: Duration) -> Result<PgPool, CliError> {
    postgres_with(common, timeout, CLI_POOL_CONNECTIONS).await
}

/// [`postgres`] with a pool of `max_connections` (maintenance jobs work in parallel).
pub async fn postgres_with(common: &CommonConfig, timeout: Duration, max_connections: u32) -> Result<PgPool, CliError> {
    let target = without_password(&common.database_url);
    let unreachable = |detail: String| CliError::Unreachable { dependency: "Postgres", target: target.clone(), detail };
    let options = PoolOptions { max_connections, acquire_timeout: timeout };
    let attempt = async {
        // One plain connection first: the pool retries a refused connection until its
        // acquire timeout, this reports the refusal (or bad password) at once.
        let probe = PgConnection::connect(&common.database_url).await?;
        let _ = probe.close().await;
        let pool = npcmem_store::connect(&common.database_url, &options).await?;
        npcmem_store::migrate(&pool).await?;
        Ok::<_, StoreError>(pool)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Err(unreachable(format!("no answer within {} s", timeout.as_secs_f32()))),
        Ok(Ok(pool)) => Ok(pool),
        Ok(Err(StoreError::Other(sqlx::Error::Configuration(error)))) => {
            Err(CliError::BadInput(format!("NPCMEM_DATABASE_URL {target} is not a usable Postgres URL: {error}")))
        }
        Ok(Err(StoreError::Migrate(error))) => Err(CliError::failed("cannot apply the migrations", error)),
        Ok(Err(error)) => Err(unreachable(error.to_string())),
    }
}

pub async fn nats(common: &CommonConfig, timeout: Duration) -> Result<async_nats::Client, CliError> {
    let mut options =
        async_nats::ConnectOptions::new().name("npcmem-cli").connection_timeout(timeout).request_timeout(Some(timeout));
    if let (Some(user), Some(password)) = (&common.nats_user, &common.nats_password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    let unreachable =
        |detail: String| CliError::Unreachable { dependency: "NATS", target: common.nats_url.clone(), detail };
    // One attempt (no retry_on_initial_connect); the outer timeout also covers DNS.
    match tokio::time::timeout(timeout + Duration::from_secs(1), options.connect(common.nats_servers())).await {
        Err(_) => Err(unreachable(format!("no answer within {} s", timeout.as_secs_f32()))),
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) if matches!(error.kind(), async_nats::ConnectErrorKind::ServerParse) => {
            Err(CliError::BadInput(format!("NPCMEM_NATS_URL {} is not a usable NATS URL: {error}", common.nats_url)))
        }
        Ok(Err(error)) => Err(unreachable(error.to_string())),
    }
}

/// NATS, JetStream and the topology names for this world's prefixes.
pub struct Bus {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub topology: Topology,
}

pub async fn bus(common: &CommonConfig, timeout: Duration) -> Result<Bus, CliError> {
    let client = nats(common, timeout).await?;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(timeout);
    Ok(Bus { client, js, topology: topology(common) })
}

pub fn topology(common: &CommonConfig) -> Topology {
    Topology::new(&common.subject_prefix, &common.stream_prefix, common.topology_settings())
}

/// The URL with its password replaced, for messages.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(without_password("postgres://app:s3cret@db:5432/npcmem"), "postgres://app:***@db:5432/npcmem");
        assert_eq!(without_password("postgres://postgres@127.0.0.1/npcmem"), "postgres://postgres@127.0.0.1/npcmem");
        assert_eq!(without_password("not a url"), "not a url");
    }
}
