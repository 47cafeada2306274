//! What the self-contained bench scenarios share: a scratch database and
//! subject/stream prefix per run, and the service processes started on them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use npcmem_bus::{StreamKind, Topology};
use npcmem_service::CommonConfig;
use tokio::process::{Child, Command};

/// A scratch database and prefix for one run.
pub struct Scratch {
    admin_url: String,
    database_name: String,
    database_url: String,
    pub pool: sqlx::PgPool,
    pub topology: Topology,
}

impl Scratch {
    pub async fn create(common: &CommonConfig, js: &jetstream::Context, id: &str) -> anyhow::Result<Self> {
        let database_name = format!("npcmem_bench_{id}");
        let admin_url = with_database(&common.database_url, "postgres");
        npcmem_store::ensure_database(&admin_url, &database_name)
            .await
            .with_context(|| "cannot create the scratch database (NPCMEM_DATABASE_URL)")?;
        let database_url = with_database(&common.database_url, &database_name);
        let pool = npcmem_store::connect(&database_url, &common.pool_options()).await?;
        npcmem_store::migrate(&pool).await?;
        let topology =
            Topology::new(&format!("bench{id}"), &format!("BENCH{}", id.to_uppercase()), common.topology_settings());
        topology.ensure(js).await?;
        Ok(Self { admin_url, database_name, database_url, pool, topology })
    }

    pub fn log_path(&self, binary: &str) -> PathBuf {
        std::env::temp_dir().join(format!("{}-{binary}.log", self.database_name))
    }

    pub async fn remove(self, js: &jetstream::Context) {
        self.pool.close().await;
        if let Err(error) = self.topology.delete_all(js).await {
            eprintln!("could not delete the scratch streams: {error}");
        }
        if let Err(error) = npcmem_store::pool::drop_database(&self.admin_url, &self.database_name).await {
            eprintln!("could not drop scratch database {}: {error}", self.database_name);
        }
    }
}

/// `url` with its database path replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// One service process of a bench run and the durable it pulls from.
pub struct ProcessSpec {
    pub binary: &'static str,
    pub env: Vec<(&'static str, String)>,
    /// The stream and the durable's short name (`ingest`, `extract`, `relate`) it pulls
    /// from; None for a service that consumes no stream (enrich).
    pub pulls: Option<(StreamKind, &'static str)>,
}

/// The service processes of one run, started in order and stopped in reverse.
pub struct Processes {
    children: Vec<(&'static str, Child)>,
}

impl Processes {
    /// Starts every process and waits until each one's durable has a pull request
    /// waiting (it creates the durable, then pulls); fails early if a process exits.
    /// Processes without a durable are only started: the caller waits for them.
    pub async fn start(
        js: &jetstream::Context,
        bin_dir: &Path,
        common: &CommonConfig,
        scratch: &Scratch,
        specs: &[ProcessSpec],
    ) -> anyhow::Result<Self> {
        let mut processes = Self { children: Vec::new() };
        for spec in specs {
            let child = spawn(bin_dir, spec.binary, common, scratch, &spec.env)?;
            processes.children.push((spec.binary, child));
        }
        let prefix = scratch.topology.stream_prefix();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for (name, child) in &mut processes.children {
                if let Some(status) = child.try_wait()? {
                    bail!("{name} exited with {status}; see {}", scratch.log_path(name).display());
                }
            }
            let mut ready = true;
            for (stream, consumer) in specs.iter().filter_map(|spec| spec.pulls) {
                ready &= pulling(js, &scratch.topology, stream, &format!("{prefix}_{consumer}")).await;
            }
            if ready {
                return Ok(processes);
            }
            if Instant::now() > deadline {
                bail!("services did not start pulling within 60 s; see the logs in {}", std::env::temp_dir().display());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn pid(&self, binary: &str) -> Option<u32> {
        self.children.iter().find(|(name, _)| *name == binary).and_then(|(_, child)| child.id())
    }

    /// SIGTERM each (the last started first), then SIGKILL whatever has not exited in 30 s.
    pub async fn stop(mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            if let Some(pid) = child.id() {
                let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
            }
            if tokio::time::timeout(Duration::from_secs(30), child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}

/// The directory holding the service binaries: `--bin-dir`, or this binary's.
pub fn bin_dir(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match given {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?.parent().context("this binary has no directory")?.to_path_buf(),
    };
    Ok(dir)
}

/// Fails unless every binary is in `dir`.
pub fn require_binaries(dir: &Path, binaries: &[&str]) -> anyhow::Result<()> {
    for binary in binaries {
        if !dir.join(binary).is_file() {
            bail!("{binary} not found in {} (build with cargo build --release, or pass --bin-dir)", dir.display());
        }
    }
    Ok(())
}

async fn pulling(js: &jetstream::Context, topology: &Topology, kind: StreamKind, durable: &str) -> bool {
    let Ok(stream) = js.get_stream(topology.stream_name(kind)).await else { return false };
    let Ok(mut consumer) = stream.get_consumer::<jetstream::consumer::pull::Config>(durable).await else {
        return false;
    };
    consumer.info().await.is_ok_and(|info| info.num_waiting > 0)
}

fn spawn(
    bin_dir: &Path,
    binary: &str,
    common: &CommonConfig,
    scratch: &Scratch,
    extra_env: &[(&str, String)],
) -> anyhow::Result<Child> {
    let log_path = scratch.log_path(binary);
    let log = std::fs::File::create(&log_path).with_context(|| format!("cannot write {}", log_path.display()))?;
    let mut command = Command::new(bin_dir.join(binary));
    command
        .env("NPCMEM_NATS_URL", &common.nats_url)
        .env("NPCMEM_DATABASE_URL", &scratch.database_url)
        .env("NPCMEM_SUBJECT_PREFIX", scratch.topology.subject_prefix())
        .env("NPCMEM_STREAM_PREFIX", scratch.topology.stream_prefix())
        .env("NPCMEM_HTTP_ADDR", "127.0.0.1:0")
        .env("NPCMEM_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    if let Some(user) = &common.nats_user {
        command.env("NPCMEM_NATS_USER", user);
    }
    if let Some(password) = &common.nats_password {
        command.env("NPCMEM_NATS_PASSWORD", password);
    }
    for (name, value) in extra_env {
        command.env(name, value);
    }
    command.spawn().with_context(|| format!("cannot start {binary}"))
}
