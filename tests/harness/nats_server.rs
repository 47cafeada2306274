//! A private nats-server on a free port, for fault and permission tests that must stop,
//! restart or configure the server without touching the shared one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

pub struct PrivateNats {
    child: Option<Child>,
    pub port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    config: Option<PathBuf>,
    envs: Vec<(String, String)>,
}

/// `deploy/local/test` exports the binary it found; Debian installs it in /usr/sbin.
pub(crate) fn nats_server_binary() -> String {
    if let Ok(binary) = std::env::var("NPCMEM_TEST_NATS_SERVER_BIN") {
        return binary;
    }
    if Path::new("/usr/sbin/nats-server").exists() {
        return "/usr/sbin/nats-server".into();
    }
    "nats-server".into()
}

impl PrivateNats {
    /// Starts a JetStream server on a free port with a fresh store directory.
    pub async fn start() -> Self {
        Self::start_with(None, Vec::new()).await
    }

    /// Starts with a configuration file (e.g. the project's nats.conf) and environment.
    pub async fn start_with(config: Option<&Path>, envs: Vec<(String, String)>) -> Self {
        let work_dir = std::env::temp_dir().join(format!("npcmem-nats-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&work_dir).expect("create a scratch directory");
        let mut server = Self {
            child: None,
            port: 0,
            store_dir: work_dir.join("store"),
            log_path: work_dir.join("nats.log"),
            config: config.map(Path::to_path_buf),
            envs,
        };
        server.launch(0).await;
        server
    }

    async fn launch(&mut self, port: u16) {
        let _ = std::fs::remove_file(&self.log_path);
        let mut command = Command::new(nats_server_binary());
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let port_arg = if port == 0 { "-1".to_string() } else { port.to_string() };
        command
            .args(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"])
            .arg(&self.store_dir)
            .arg("-l")
            .arg(&self.log_path)
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.child = Some(command.spawn().expect("nats-server starts (is it installed?)"));
        self.port = self.wait_for_port().await;
    }

    async fn wait_for_port(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(log) = std::fs::read_to_string(&self.log_path)
                && let Some(line) = log.lines().find(|l| l.contains("Listening for client connections on"))
                && let Some(port) = line.rsplit(':').next().and_then(|p| p.trim().parse::<u16>().ok())
            {
                return port;
            }
            assert!(Instant::now() < deadline, "nats-server did not start; log at {}", self.log_path.display());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL the server (its JetStream store survives on disk).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("kill nats-server");
        }
    }

    /// Starts it again on the same port and store.
    pub async fn restart(&mut self) {
        self.kill().await;
        let port = self.port;
        self.launch(port).await;
        assert_eq!(self.port, port, "restarted on the same port");
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
