//! `deploy/local/up` checks JetStream before it builds or starts anything: against a NATS
//! server with no room for the world's streams it says so in one message with the fix,
//! exits non-zero and leaves nothing running and no stream behind.

use std::path::Path;

use npcmem_tests::nats_server::PrivateNats;

#[tokio::test]
async fn up_against_a_nats_without_room_says_why_and_starts_nothing() {
    let scratch = std::env::temp_dir().join(format!("npcmem-up-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&scratch).unwrap();
    let config = scratch.join("small.conf");
    std::fs::write(&config, "jetstream { max_file_store: 64MB }\n").unwrap();
    let nats = PrivateNats::start_with(Some(&config), Vec::new()).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository");
    let local = scratch.join("local");
    let output = tokio::process::Command::new("bash")
        .arg(root.join("deploy/local/up"))
        .env("NPCMEM_NATS_URL", nats.url())
        .env("NPCMEM_LOCAL_DIR", &local)
        .env("NPCMEM_SKIP_BUILD", "1")
        .env_remove("NPCMEM_PRIVATE_SERVERS")
        .output()
        .await
        .expect("bash runs up");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "up fails: {stderr}");
    assert!(stderr.contains("has no room for this world's 6 streams, which reserve 1.5 GiB"), "{stderr}");
    assert!(stderr.contains("insufficient storage resources"), "JetStream's own words: {stderr}");
    assert!(stderr.contains("Fix:") && stderr.contains("NPCMEM_LIMITS_STREAM_MAX_BYTES"), "{stderr}");
    assert!(stderr.lines().count() <= 5, "one message, not a screen of logs: {stderr}");
    let running: Vec<_> = std::fs::read_dir(local.join("run"))
        .map(|entries| entries.flatten().map(|e| e.file_name()).filter(|n| n != ".lock").collect())
        .unwrap_or_default();
    assert!(running.is_empty(), "nothing started or recorded: {running:?}");
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let streams: Vec<String> =
        futures::StreamExt::collect::<Vec<_>>(js.stream_names()).await.into_iter().flatten().collect();
    assert!(streams.is_empty(), "no stream left behind, the probe included: {streams:?}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The binaries `up` starts, as the test package builds them (same entry points).
const BINARIES: [(&str, &str); 7] = [
    ("npcmem-ingest", env!("CARGO_BIN_EXE_it-npcmem-ingest")),
    ("npcmem-extract", env!("CARGO_BIN_EXE_it-npcmem-extract")),
    ("npcmem-relate", env!("CARGO_BIN_EXE_it-npcmem-relate")),
    ("npcmem-consolidate", env!("CARGO_BIN_EXE_it-npcmem-consolidate")),
    ("npcmem-gossip", env!("CARGO_BIN_EXE_it-npcmem-gossip")),
    ("npcmem-enrich", env!("CARGO_BIN_EXE_it-npcmem-enrich")),
    ("npcmem", env!("CARGO_BIN_EXE_it-npcmem")),
];

/// Runs `deploy/local/down` for the world when dropped, so a failed assertion leaves no
/// servers or services running.
/// One world at a time: `up` picks free ports before the services bind them, and two
/// worlds starting together can pick the same one.
static ONE_WORLD: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) struct World {
    _turn: std::sync::MutexGuard<'static, ()>,
    root: std::path::PathBuf,
    scratch: std::path::PathBuf,
    /// Where `up` put the private PostgreSQL cluster when its user cannot reach the
    /// scratch directory (running as root); `down` stops it and keeps its data.
    outside_cluster: Option<std::path::PathBuf>,
}

impl World {
    /// `deploy/local/up` on private NATS and PostgreSQL in a scratch directory, with the
    /// test package's binaries as the release build; panics with up's output on failure.
    pub(crate) fn up() -> (Self, String) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf();
        // Inside the build directory: the binaries are hard-linked, not copied.
        let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("up-{}", uuid::Uuid::new_v4().simple()));
        let release = scratch.join("target/release");
        std::fs::create_dir_all(&release).unwrap();
        std::fs::create_dir_all(scratch.join("world")).unwrap();
        for (name, built) in BINARIES {
            if std::fs::hard_link(built, release.join(name)).is_err() {
                std::fs::copy(built, release.join(name)).unwrap();
            }
        }
        let turn = ONE_WORLD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut world = World { _turn: turn, root, scratch, outside_cluster: None };
        let up_once = || world.script("up").env("NPCMEM_SKIP_BUILD", "1").env("NPCMEM_PRIVATE_SERVERS", "1").output();
        let mut up = up_once().unwrap();
        // A port taken by another test between up's check and the service's bind: once more.
        if !up.status.success() && String::from_utf8_lossy(&up.stderr).contains("Address already in use") {
            up = up_once().unwrap();
        }
        let (up_out, up_err) = (String::from_utf8_lossy(&up.stdout), String::from_utf8_lossy(&up.stderr));
        world.outside_cluster = up_err
            .split_once("so the cluster lives in ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(std::path::PathBuf::from);
        assert!(up.status.success(), "up succeeds:\n{up_out}\n{up_err}");
        let printed = format!("{up_out}\n{up_err}");
        (world, printed)
    }

    /// The repository and the world's working directory.
    pub(crate) fn repository(&self) -> &Path {
        &self.root
    }

    /// The endpoints `up` wrote.
    pub(crate) fn env_file(&self) -> std::path::PathBuf {
        self.scratch.join("world/.local/env")
    }

    /// Where the world's binaries are (`<target>/release`).
    pub(crate) fn release(&self) -> std::path::PathBuf {
        self.scratch.join("target/release")
    }

    /// A command with none of the caller's `NPCMEM_*` variables: as a new user's shell.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut command = std::process::Command::new(program);
        command.env_clear().current_dir(self.scratch.join("world"));
        for key in ["PATH", "HOME", "USER", "LANG", "TMPDIR"] {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        command
    }

    pub(crate) fn script(&self, name: &str) -> std::process::Command {
        let mut command = self.command("bash");
        command
            .arg(self.root.join("deploy/local").join(name))
            .env("NPCMEM_LOCAL_DIR", self.scratch.join("world/.local"))
            .env("CARGO_TARGET_DIR", self.scratch.join("target"));
        command
    }

    /// The pids `up` recorded that still run.
    pub(crate) fn running(&self) -> Vec<String> {
        let run = self.scratch.join("world/.local/run");
        let Ok(entries) = std::fs::read_dir(&run) else { return Vec::new() };
        entries
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pid"))
            .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
            .map(|pid| pid.trim().to_string())
            .filter(|pid| Path::new("/proc").join(pid).exists())
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.script("down").output();
        let _ = std::fs::remove_dir_all(&self.scratch);
        if let Some(cluster) = &self.outside_cluster {
            let _ = std::fs::remove_dir_all(cluster);
        }
    }
}

#[test]
fn after_up_on_private_servers_the_demo_finds_the_system_with_no_variables_set() {
    let (world, printed) = World::up();
    assert!(printed.lines().count() <= 41, "up prints at most a screen:\n{printed}");
    let env_file = std::fs::read_to_string(world.env_file()).expect("up writes .local/env");
    assert!(env_file.contains("NPCMEM_NATS_URL=") && !env_file.contains(":4222"), "a private NATS: {env_file}");

    // The demo from the world's directory, nothing set: it reads .local/env.
    let demo = world.command(world.release().join("npcmem")).args(["demo", "--timeout-secs", "60"]).output().unwrap();
    let (demo_out, demo_err) = (String::from_utf8_lossy(&demo.stdout), String::from_utf8_lossy(&demo.stderr));
    assert!(demo.status.success(), "the demo succeeds:\n{demo_out}\n{demo_err}");
    assert!(demo_out.contains("=== Brom's prompt after the scene ==="), "{demo_out}");

    let down = world.script("down").output().unwrap();
    assert!(down.status.success(), "down succeeds: {}", String::from_utf8_lossy(&down.stderr));
    assert!(world.running().is_empty(), "nothing left running: {:?}", world.running());
}
