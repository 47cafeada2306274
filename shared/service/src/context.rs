//! The connected runtime a service starts from: NATS, JetStream, the Postgres pool with
//! migrations applied, the topology ensured, and the shared metrics.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use npcmem_bus::{BusMetrics, OutboxRelay, Topology};
use prometheus_client::registry::Registry;
use sqlx::PgPool;
use tracing::{info, warn};

use crate::config::CommonConfig;
use crate::error::ServiceError;
use crate::health::Health;

pub struct ServiceContext {
    pub config: CommonConfig,
    pub service_name: String,
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub pool: PgPool,
    pub topology: Topology,
    pub bus_metrics: BusMetrics,
    pub health: Health,
}

impl ServiceContext {
    /// Connects to NATS and Postgres (retrying until `startup_timeout_secs`), applies the
    /// migrations and ensures the stream topology. Start order of services never matters.
    pub async fn connect(
        config: &CommonConfig,
        service_name: &str,
        registry: &mut Registry,
    ) -> Result<Self, ServiceError> {
        config.validate()?;
        let deadline = Instant::now() + Duration::from_secs(config.startup_timeout_secs);
        let nats = retry_until(deadline, "nats", || connect_nats(config, service_name)).await?;
        let js = jetstream::new(nats.clone());
        let pool = retry_until(deadline, "postgres", || async {
            let pool = npcmem_store::connect(&config.database_url, &config.pool_options()).await?;
            npcmem_store::migrate(&pool).await?;
            Ok::<_, ServiceError>(pool)
        })
        .await?;
        let topology = Topology::new(&config.subject_prefix, &config.stream_prefix, config.topology_settings());
        retry_until(deadline, "jetstream topology", || async {
            topology.ensure(&js).await.map_err(ServiceError::from)
        })
        .await?;
        let bus_metrics = BusMetrics::register(registry);
        let health = Health::new(pool.clone(), nats.clone(), bus_metrics.clone());
        info!(service = service_name, subject_prefix = %config.subject_prefix, "connected");
        Ok(Self {
            config: config.clone(),
            service_name: service_name.to_string(),
            nats,
            js,
            pool,
            topology,
            bus_metrics,
            health,
        })
    }

    pub fn outbox_relay(&self) -> OutboxRelay {
        OutboxRelay {
            pool: self.pool.clone(),
            js: self.js.clone(),
            settings: self.config.relay_settings(),
            metrics: self.bus_metrics.clone(),
        }
    }
}

async fn connect_nats(config: &CommonConfig, service_name: &str) -> Result<async_nats::Client, ServiceError> {
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("npcmem-{service_name}"))
        .connection_timeout(Duration::from_secs(5))
        .request_timeout(Some(Duration::from_secs(5)));
    if let (Some(user), Some(password)) = (&config.nats_user, &config.nats_password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    // No retry_on_initial_connect: a failed first connect returns, and `retry_until`
    // decides how long to keep trying. Once connected the client reconnects by itself.
    let client = options
        .connect(config.nats_servers())
        .await
        .map_err(|error| ServiceError::Bus(npcmem_bus::BusError::Connect(error)))?;
    Ok(client)
}

async fn retry_until<T, F, Fut>(deadline: Instant, what: &str, mut attempt: F) -> Result<T, ServiceError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ServiceError>>,
{
    let mut delay = Duration::from_millis(200);
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() + delay < deadline => {
                warn!(%error, what, "not reachable yet, retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(error) => return Err(error),
        }
    }
}

/// What runs beside a service's consumers: the HTTP listener, the outbox relay and the
/// metrics sampler. Started once the consumers exist; stopped after they returned.
pub struct Support {
    pub http_addr: std::net::SocketAddr,
    http_task: tokio::task::JoinHandle<()>,
    relay_shutdown: crate::Shutdown,
    relay_task: tokio::task::JoinHandle<()>,
    sampler_task: tokio::task::JoinHandle<()>,
    budget_task: Option<tokio::task::JoinHandle<()>>,
}

impl ServiceContext {
    /// Starts the HTTP listener on `NPCMEM_HTTP_ADDR` (else `default_http_addr`), the
    /// outbox relay and the metrics sampler for `consumers`, and reports ready.
    pub async fn start_support(
        &self,
        registry: Registry,
        default_http_addr: &str,
        consumers: Vec<npcmem_bus::ConsumerSpec>,
        shutdown: &crate::Shutdown,
    ) -> Result<Support, ServiceError> {
        self.start_support_with_routes(registry, default_http_addr, consumers, shutdown, None).await
    }

    /// [`ServiceContext::start_support`] with the service's own HTTP routes served beside
    /// `/healthz`, `/readyz` and `/metrics` (enrich's `POST /v1/context`).
    pub async fn start_support_with_routes(
        &self,
        registry: Registry,
        default_http_addr: &str,
        consumers: Vec<npcmem_bus::ConsumerSpec>,
        shutdown: &crate::Shutdown,
        routes: Option<axum::Router>,
    ) -> Result<Support, ServiceError> {
        let http_addr = match self.config.http_addr {
            Some(addr) => addr,
            None => default_http_addr
                .parse()
                .map_err(|_| ServiceError::Config(format!("bad default http address {default_http_addr}")))?,
        };
        let mut registry = registry;
        if let Some(budgets) = self.health.budgets() {
            budgets.register(&mut registry);
        }
        let (bound, http_task) = crate::http::serve(
            http_addr,
            self.health.clone(),
            std::sync::Arc::new(registry),
            routes,
            shutdown.subscribe(),
        )
        .await?;
        // The relay outlives the consumers so that shutdown can flush what they committed.
        let relay_shutdown = crate::Shutdown::new();
        let relay_task = tokio::spawn(self.outbox_relay().run(relay_shutdown.subscribe()));
        let sampler_task = tokio::spawn(npcmem_bus::metrics::sample_loop(
            self.bus_metrics.clone(),
            self.pool.clone(),
            self.js.clone(),
            self.topology.clone(),
            consumers,
            Duration::from_secs(5),
            relay_shutdown.subscribe(),
        ));
        let budget_task = self.health.budgets().filter(|budgets| !budgets.is_empty()).map(|budgets| {
            tokio::spawn(crate::error_budgets::monitor(
                budgets.clone(),
                self.pool.clone(),
                self.nats.clone(),
                self.topology.clone(),
                self.service_name.clone(),
                self.config.budget_monitor(),
                relay_shutdown.subscribe(),
            ))
        });
        self.health.set_ready(true);
        info!(service = %self.service_name, http = %bound, "ready");
        Ok(Support { http_addr: bound, http_task, relay_shutdown, relay_task, sampler_task, budget_task })
    }
}

impl Support {
    /// After the consumers returned: flush the outbox, stop the sampler and the listener.
    pub async fn stop(self, context: &ServiceContext) {
        context.health.set_ready(false);
        self.relay_shutdown.trigger();
        // The sampler only reads; it may be stuck on a NATS request timeout, so stop it.
        self.sampler_task.abort();
        let _ = self.relay_task.await;
        if let Some(task) = self.budget_task {
            let _ = task.await;
        }
        let _ = self.http_task.await;
        context.nats.flush().await.ok();
        info!(service = %context.service_name, "stopped");
    }
}
