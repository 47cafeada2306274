//! The gossip service: owns knowledge. Learns facts from memories and the
//! world, tracks where NPCs are, and each tick lets co-located NPCs pass on what they
//! know, emitting `event.knowledge.learned`,
//! `signal.secret_learned` and `cache.invalidate`.

pub mod learn;
pub mod tick;

use std::time::Duration;

use npcmem_bus::{ConsumerLoop, StreamKind};
use npcmem_service::{CommonConfig, ServiceContext, ServiceError, Shutdown};
use npcmem_store::{PgConnection, maintenance};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use sqlx::Connection;
use tracing::{info, warn};

pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9304";
pub const CONSUMER_LEARN: &str = "gossip-learn";
pub const CONSUMER_WORLD: &str = "gossip-world";
/// The leader lock: one replica ticks at a time.
const LEADER_JOB: &str = "gossip-tick";
/// How often the leader checks that its lock connection is still alive.
const LEADER_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the leader hands the heap its ticks freed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// npcmem-gossip: knowledge and its spread between NPCs.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-gossip", version, about, args_override_self = true)]
pub struct GossipConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    /// Time between ticks.
    #[arg(long, env = "NPCMEM_GOSSIP_TICK_MS", default_value_t = 1_000)]
    pub gossip_tick_ms: u64,
    /// Exchanges per tick (the original design's 3; large worlds need far more).
    #[arg(long, env = "NPCMEM_GOSSIP_BUDGET", default_value_t = 3)]
    pub gossip_budget: usize,
}

pub fn main() -> std::process::ExitCode {
    use clap::Parser;
    let config = GossipConfig::parse();
    npcmem_service::run_main(config.common.telemetry("gossip"), |shutdown| run(config, shutdown))
}

pub async fn run(config: GossipConfig, shutdown: Shutdown) -> Result<(), ServiceError> {
    if config.gossip_budget == 0 || config.gossip_tick_ms == 0 {
        return Err(ServiceError::Config("NPCMEM_GOSSIP_BUDGET and NPCMEM_GOSSIP_TICK_MS must be positive".into()));
    }
    let mut registry = Registry::default();
    let context = ServiceContext::connect(&config.common, "gossip", &mut registry).await?;
    let exchanges = Counter::<u64>::default();
    let tick_seconds = Histogram::new([0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5]);
    registry.register("npcmem_gossip_exchanges", "Facts passed from one NPC to another", exchanges.clone());
    registry.register(
        "npcmem_gossip_tick_seconds",
        "Duration of a gossip tick, its commit included",
        tick_seconds.clone(),
    );
    let world_entries = Family::<Vec<(String, String)>, Gauge>::default();
    registry.register(
        "npcmem_gossip_world_entries",
        "Entries of the leader's in-memory world after its last tick, by set (holders, known, claims, refused)",
        world_entries.clone(),
    );
    let topology = context.topology.clone();
    let learn = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_LEARN, StreamKind::Events, topology.event("memory.stored")),
        settings: context.config.consumer_settings(),
        handler: learn::LearnHandler {
            pool: context.pool.clone(),
            topology: topology.clone(),
            nats: context.nats.clone(),
        },
        metrics: context.bus_metrics.clone(),
    };
    let world = ConsumerLoop {
        js: context.js.clone(),
        topology: topology.clone(),
        spec: topology.consumer(CONSUMER_WORLD, StreamKind::World, topology.subject("world.>")),
        settings: context.config.consumer_settings(),
        handler: learn::WorldHandler {
            pool: context.pool.clone(),
            topology: topology.clone(),
            nats: context.nats.clone(),
        },
        metrics: context.bus_metrics.clone(),
    };
    let learn_consumer = learn.prepare().await?;
    let world_consumer = world.prepare().await?;
    let support = context
        .start_support(registry, DEFAULT_HTTP_ADDR, vec![learn.spec.clone(), world.spec.clone()], &shutdown)
        .await?;
    let mut ticker =
        tick::Ticker::new(context.pool.clone(), topology.clone(), Some(context.nats.clone()), config.gossip_budget);
    ticker.watch_switches().await.map_err(|error| npcmem_bus::BusError::Subscribe {
        subject: topology.control_changed(),
        message: error.to_string(),
    })?;
    let ticking = tokio::spawn(lead(
        ticker,
        config.common.database_url.clone(),
        Duration::from_millis(config.gossip_tick_ms),
        Metrics { exchanges, tick_seconds, world_entries },
        shutdown.subscribe(),
    ));
    let learning = tokio::spawn(learn.run(learn_consumer, shutdown.subscribe()));
    world.run(world_consumer, shutdown.subscribe()).await;
    let _ = learning.await;
    let _ = ticking.await;
    support.stop(&context).await;
    Ok(())
}

/// What the leader's ticks report on `/metrics`.
struct Metrics {
    exchanges: Counter<u64>,
    tick_seconds: Histogram,
    world_entries: Family<Vec<(String, String)>, Gauge>,
}

/// Ticks while this replica holds the leader lock; otherwise tries to take it every tick.
async fn lead(
    mut ticker: tick::Ticker,
    database_url: String,
    every: Duration,
    metrics: Metrics,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut leader: Option<PgConnection> = None;
    let mut last_check = tokio::time::Instant::now();
    let mut last_trim = tokio::time::Instant::now();
    // The first tick comes one interval after start, when the consumers have caught up.
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.changed() => break,
        }
        // A leader whose lock connection died (Postgres restarted, network cut) lost the
        // lock with it: stop ticking and try to take it again, so two replicas never tick.
        if let Some(connection) = leader.as_mut()
            && last_check.elapsed() >= LEADER_CHECK_EVERY
        {
            last_check = tokio::time::Instant::now();
            if let Err(error) = connection.ping().await {
                warn!(%error, "gossip leader lost its lock connection; stepping down");
                leader = None;
            }
        }
        if leader.is_none() {
            match PgConnection::connect(&database_url).await {
                Ok(mut connection) => match maintenance::try_lock_job(&mut connection, LEADER_JOB).await {
                    Ok(true) => {
                        info!("gossip leader: this replica ticks");
                        ticker.start_over();
                        if let Err(error) = ticker.watch_changes().await {
                            warn!(%error, "gossip leader cannot listen for world changes; it reloads every tick");
                        }
                        leader = Some(connection);
                    }
                    Ok(false) => continue,
                    Err(error) => {
                        warn!(%error, "cannot take the gossip leader lock");
                        continue;
                    }
                },
                Err(error) => {
                    warn!(%error, "cannot connect for the gossip leader lock");
                    continue;
                }
            }
        }
        match ticker.tick().await {
            Ok(report) => {
                metrics.exchanges.inc_by(report.exchanges as u64);
                if !report.skipped {
                    metrics.tick_seconds.observe(report.duration.as_secs_f64());
                    let world = report.world;
                    for (set, entries) in [
                        ("holders", world.holders),
                        ("known", world.known),
                        ("claims", world.claims),
                        ("refused", world.refused),
                    ] {
                        metrics
                            .world_entries
                            .get_or_create(&vec![("set".to_owned(), set.to_owned())])
                            .set(entries as i64);
                    }
                }
            }
            Err(error) => warn!(%error, "gossip tick failed; the next one tries again"),
        }
        if last_trim.elapsed() >= TRIM_EVERY {
            last_trim = tokio::time::Instant::now();
            release_freed_memory();
        }
    }
    if let Some(connection) = leader {
        let _ = connection.close().await;
    }
}

/// Returns the free pages of every malloc arena to the system: the leader's loads and the
/// learn path's checks free megabytes at a time, which glibc otherwise keeps. In a soak,
/// gossip's RSS held 26–30 MB with this against 29–36 MB without.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
