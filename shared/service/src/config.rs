//! Settings every service shares. Each appears in `--help` with its variable.

use std::net::SocketAddr;
use std::time::Duration;

use npcmem_bus::{ConsumerSettings, RelaySettings, RetryPolicy, TopologySettings};
use npcmem_store::PoolOptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CommonConfig {
    /// NATS server URL(s), comma-separated.
    #[arg(long, env = "NPCMEM_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    #[arg(long, env = "NPCMEM_NATS_USER")]
    pub nats_user: Option<String>,
    #[arg(long, env = "NPCMEM_NATS_PASSWORD", hide_env_values = true)]
    pub nats_password: Option<String>,
    #[arg(long, env = "NPCMEM_DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/npcmem")]
    pub database_url: String,
    #[arg(long, env = "NPCMEM_DATABASE_MAX_CONNECTIONS", default_value_t = 8)]
    pub database_max_connections: u32,
    /// Prefix of every subject; isolates game worlds sharing a NATS cluster.
    #[arg(long, env = "NPCMEM_SUBJECT_PREFIX", default_value = "npcmem")]
    pub subject_prefix: String,
    /// Prefix of every stream and durable consumer name.
    #[arg(long, env = "NPCMEM_STREAM_PREFIX", default_value = "NPCMEM")]
    pub stream_prefix: String,
    /// Address of /healthz, /readyz and /metrics (port 0 picks a free one).
    #[arg(long, env = "NPCMEM_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    #[arg(long, env = "NPCMEM_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,
    /// Messages pulled and committed together.
    #[arg(long, env = "NPCMEM_BATCH_SIZE", default_value_t = 64)]
    pub batch_size: usize,
    /// Batches a consumer handles at once, each in its own transaction.
    #[arg(long, env = "NPCMEM_CONSUMER_CONCURRENCY", default_value_t = 2)]
    pub consumer_concurrency: usize,
    #[arg(long, env = "NPCMEM_ACK_WAIT_SECS", default_value_t = 30)]
    pub ack_wait_secs: u64,
    #[arg(long, env = "NPCMEM_MAX_DELIVER", default_value_t = 5)]
    pub max_deliver: i64,
    #[arg(long, env = "NPCMEM_MAX_ACK_PENDING", default_value_t = 1000)]
    pub max_ack_pending: i64,
    /// First retry delay after a transient failure; later ones triple up to 60 s.
    #[arg(long, env = "NPCMEM_RETRY_INITIAL_MS", default_value_t = 1000)]
    pub retry_initial_ms: u64,
    #[arg(long, env = "NPCMEM_DUPLICATE_WINDOW_SECS", default_value_t = 120)]
    pub duplicate_window_secs: u64,
    #[arg(long, env = "NPCMEM_MAX_MESSAGE_BYTES", default_value_t = 1024 * 1024)]
    pub max_message_bytes: i32,
    /// max_bytes of each work-queue stream (CONVERSATIONS, JOBS); new messages are refused beyond it.
    #[arg(long, env = "NPCMEM_WORK_QUEUE_MAX_BYTES", default_value_t = 1024 * 1024 * 1024)]
    pub work_queue_max_bytes: i64,
    /// max_bytes of each limits stream (EVENTS, WORLD, SIGNALS, DLQ); oldest dropped beyond it.
    #[arg(long, env = "NPCMEM_LIMITS_STREAM_MAX_BYTES", default_value_t = 1024 * 1024 * 1024)]
    pub limits_stream_max_bytes: i64,
    /// Stream replicas (3 on a JetStream cluster).
    #[arg(long, env = "NPCMEM_STREAM_REPLICAS", default_value_t = 1)]
    pub stream_replicas: usize,
    /// Outbox rows published per round (also the window of outstanding PubAcks).
    #[arg(long, env = "NPCMEM_OUTBOX_BATCH_SIZE", default_value_t = 256)]
    pub outbox_batch_size: i64,
    #[arg(long, env = "NPCMEM_OUTBOX_POLL_MS", default_value_t = 500)]
    pub outbox_poll_ms: u64,
    /// An OTLP/HTTP collector (`http://collector:4318`): spans go to its `/v1/traces` as
    /// JSON. Unset: no traces.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Error budgets (automatic degraded mode) are judged over windows this long.
    #[arg(long, env = "NPCMEM_BUDGET_WINDOW_MS", default_value_t = 10_000)]
    pub budget_window_ms: u64,
    /// Windows in a row past a budget's degraded threshold before it counts as breached.
    #[arg(long, env = "NPCMEM_BUDGET_ENTER_WINDOWS", default_value_t = 3)]
    pub budget_enter_windows: u32,
    /// Windows in a row within a budget's target before a breach is over.
    #[arg(long, env = "NPCMEM_BUDGET_LEAVE_WINDOWS", default_value_t = 6)]
    pub budget_leave_windows: u32,
    /// How long start-up waits for NATS and Postgres before giving up.
    #[arg(long, env = "NPCMEM_STARTUP_TIMEOUT_SECS", default_value_t = 60)]
    pub startup_timeout_secs: u64,
}

impl CommonConfig {
    pub fn validate(&self) -> Result<(), crate::ServiceError> {
        let valid_token =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_token(&self.subject_prefix) {
            return Err(crate::ServiceError::Config(format!(
                "NPCMEM_SUBJECT_PREFIX {:?} must be letters, digits, '_' or '-'",
                self.subject_prefix
            )));
        }
        if !valid_token(&self.stream_prefix) {
            return Err(crate::ServiceError::Config(format!(
                "NPCMEM_STREAM_PREFIX {:?} must be letters, digits, '_' or '-'",
                self.stream_prefix
            )));
        }
        if self.batch_size == 0 || self.batch_size > 1000 {
            return Err(crate::ServiceError::Config("NPCMEM_BATCH_SIZE must be 1..=1000".into()));
        }
        if self.consumer_concurrency == 0 || self.consumer_concurrency > 64 {
            return Err(crate::ServiceError::Config("NPCMEM_CONSUMER_CONCURRENCY must be 1..=64".into()));
        }
        if !(1..=10_000).contains(&self.outbox_batch_size) {
            return Err(crate::ServiceError::Config("NPCMEM_OUTBOX_BATCH_SIZE must be 1..=10000".into()));
        }
        // Each in-flight batch holds a connection; the relay, its listener, the metrics
        // sampler and /healthz need theirs too.
        let needed = self.consumer_concurrency as u32 * 2 + 3;
        if self.database_max_connections < needed {
            return Err(crate::ServiceError::Config(format!(
                "NPCMEM_DATABASE_MAX_CONNECTIONS must be at least {needed} with NPCMEM_CONSUMER_CONCURRENCY {}",
                self.consumer_concurrency
            )));
        }
        if self.budget_window_ms < 100 {
            return Err(crate::ServiceError::Config("NPCMEM_BUDGET_WINDOW_MS must be at least 100".into()));
        }
        if self.budget_enter_windows == 0 || self.budget_leave_windows == 0 {
            return Err(crate::ServiceError::Config(
                "NPCMEM_BUDGET_ENTER_WINDOWS and NPCMEM_BUDGET_LEAVE_WINDOWS must be at least 1".into(),
            ));
        }
        if self.max_deliver < 2 {
            return Err(crate::ServiceError::Config("NPCMEM_MAX_DELIVER must be at least 2".into()));
        }
        Ok(())
    }

    pub fn topology_settings(&self) -> TopologySettings {
        TopologySettings {
            max_message_bytes: self.max_message_bytes,
            work_queue_max_bytes: self.work_queue_max_bytes,
            limits_stream_max_bytes: self.limits_stream_max_bytes,
            duplicate_window: Duration::from_secs(self.duplicate_window_secs),
            replicas: self.stream_replicas,
            memory_storage: false,
            ack_wait: Duration::from_secs(self.ack_wait_secs),
            max_deliver: self.max_deliver,
            max_ack_pending: self.max_ack_pending,
        }
    }

    /// How the `service` process logs and traces.
    pub fn telemetry(&self, service: &str) -> crate::telemetry::Telemetry {
        crate::telemetry::Telemetry {
            service: format!("npcmem-{service}"),
            log_format: self.log_format,
            otlp_endpoint: self.otlp_endpoint.clone().filter(|endpoint| !endpoint.trim().is_empty()),
        }
    }

    /// The NATS servers of `NPCMEM_NATS_URL`, comma-separated: the client tries them in
    /// turn and reconnects to any of them.
    pub fn nats_servers(&self) -> Vec<&str> {
        self.nats_url.split(',').map(str::trim).filter(|url| !url.is_empty()).collect()
    }

    /// An empty set of error budgets with this configuration's hysteresis; a service
    /// fills it with its checks and hands it to [`crate::Health::watch_budgets`].
    pub fn error_budgets(&self, checks: &[crate::error_budgets::Check]) -> crate::ErrorBudgets {
        crate::ErrorBudgets::new(checks, self.budget_enter_windows, self.budget_leave_windows)
    }

    pub fn budget_monitor(&self) -> crate::error_budgets::MonitorSettings {
        crate::error_budgets::MonitorSettings {
            window: Duration::from_millis(self.budget_window_ms),
            expires_after_windows: self.budget_enter_windows.max(self.budget_leave_windows) + 1,
        }
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { initial_delay: Duration::from_millis(self.retry_initial_ms), ..RetryPolicy::default() }
    }

    pub fn consumer_settings(&self) -> ConsumerSettings {
        ConsumerSettings {
            batch_size: self.batch_size,
            retry: self.retry_policy(),
            concurrency: self.consumer_concurrency,
            ..ConsumerSettings::default()
        }
    }

    pub fn relay_settings(&self) -> RelaySettings {
        RelaySettings {
            batch_size: self.outbox_batch_size,
            poll_interval: Duration::from_millis(self.outbox_poll_ms),
            ..RelaySettings::default()
        }
    }

    pub fn pool_options(&self) -> PoolOptions {
        PoolOptions { max_connections: self.database_max_connections, ..PoolOptions::default() }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        common: super::CommonConfig,
    }

    #[test]
    fn several_nats_servers_are_comma_separated() {
        let flags = Flags::parse_from(["x", "--nats-url", "nats://a:4301, nats://b:4302,,nats://c:4303"]);
        assert_eq!(flags.common.nats_servers(), ["nats://a:4301", "nats://b:4302", "nats://c:4303"]);
        let flags = Flags::parse_from(["x"]);
        assert_eq!(flags.common.nats_servers(), ["nats://127.0.0.1:4222"]);
    }
}
