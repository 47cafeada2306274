//! Running a service as a real OS process, for crash tests.

use std::process::Stdio;

use tokio::process::{Child, Command};

pub struct ServiceProcess {
    pub child: Child,
}

impl ServiceProcess {
    /// `binary` is a path, normally `env!("CARGO_BIN_EXE_it-npcmem-ingest")`.
    pub fn spawn(binary: &str, args: &[String]) -> Self {
        let child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", std::env::var("NPCMEM_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .env_remove("NPCMEM_DATABASE_URL")
            .env_remove("NPCMEM_NATS_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the service binary starts");
        Self { child }
    }

    /// SIGKILL: no graceful shutdown, nothing flushed.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill the service process");
    }

    /// SIGTERM, then wait for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("a running child has a pid");
        let status = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM works");
        tokio::time::timeout(std::time::Duration::from_secs(30), self.child.wait())
            .await
            .expect("the service exits within 30 s of SIGTERM")
            .expect("wait for the service")
    }
}
