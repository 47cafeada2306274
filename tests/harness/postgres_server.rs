//! A private PostgreSQL cluster on a free port, for the fault matrix's restart cell: the
//! shared server cannot be restarted under the other tests. initdb refuses root, so as
//! root the cluster belongs to the `postgres` user and every command runs through
//! `runuser`, as `deploy/local/up` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct PrivatePostgres {
    pub port: u16,
    bin_dir: PathBuf,
    work_dir: PathBuf,
    run_as_postgres: bool,
}

/// `NPCMEM_PG_BINDIR`, else the newest /usr/lib/postgresql/*/bin (Debian), else `PATH`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPCMEM_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_default()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free port").port()
}

impl PrivatePostgres {
    /// initdb in a fresh directory and start the server; blocks until it accepts
    /// connections.
    pub fn start() -> Self {
        let run_as_postgres = is_root();
        let work_dir = std::env::temp_dir().join(format!("npcmem-pg-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&work_dir).expect("create a scratch directory");
        let server = Self { port: free_port(), bin_dir: bin_dir(), work_dir, run_as_postgres };
        if run_as_postgres {
            let chown = Command::new("chown").arg("postgres:postgres").arg(&server.work_dir).output();
            assert!(chown.is_ok_and(|out| out.status.success()), "the postgres user owns the scratch directory");
        }
        server.run(
            "initdb",
            &["-D", &server.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
        );
        server.start_server();
        server
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, the admin URL test databases are made from.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server as `pg_ctl restart` does (fast: sessions are ended and their
    /// transactions rolled back) and leaves it down until [`Self::start_server`].
    pub fn stop_server(&self) {
        self.stop("fast");
    }

    /// Starts the stopped server on the same port and data.
    pub fn start_server(&self) {
        let options =
            format!("-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off", self.port, self.work_dir.display());
        let log = self.work_dir.join("postgres.log");
        self.run(
            "pg_ctl",
            &["start", "-w", "-t", "60", "-D", &self.data(), "-l", &log.to_string_lossy(), "-o", &options],
        );
    }

    fn stop(&self, mode: &str) {
        self.run("pg_ctl", &["stop", "-w", "-t", "60", "-m", mode, "-D", &self.data()]);
    }

    fn data(&self) -> String {
        self.work_dir.join("data").to_string_lossy().into_owned()
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let binary = self.bin_dir.join(program);
        let output = if self.run_as_postgres {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&binary).args(args).output()
        } else {
            Command::new(&binary).args(args).output()
        }
        .unwrap_or_else(|error| panic!("{} runs: {error}", binary.display()));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let binary = self.bin_dir.join("pg_ctl");
        let data = self.data();
        let args = ["stop", "-w", "-m", "immediate", "-D", data.as_str()];
        let _ = if self.run_as_postgres {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&binary).args(args).output()
        } else {
            Command::new(&binary).args(args).output()
        };
        let _ = std::fs::remove_dir_all(Path::new(&self.work_dir));
    }
}
