//! A private three-node NATS JetStream cluster on loopback (routes between the nodes, a
//! file store each, in a scratch directory), for tests that kill a node or move a stream
//! leader without touching the shared server. Each node keeps its ports across a restart,
//! so the others' routes and the clients' discovered URLs find it again.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::nats_server::nats_server_binary;

struct Node {
    name: String,
    client_port: u16,
    monitor_port: u16,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

pub struct NatsCluster {
    nodes: Vec<Node>,
    work_dir: PathBuf,
}

impl NatsCluster {
    /// Starts `size` nodes and waits until JetStream has a meta leader every node agrees on.
    pub async fn start(size: usize) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let work_dir = std::env::temp_dir().join(format!("npcmem-nats-cluster-{id}"));
        std::fs::create_dir_all(&work_dir).expect("create a scratch directory");
        // Chosen up front: every node's routes name all the route ports.
        let ports = crate::free_ports(3 * size);
        let (route_ports, other_ports) = ports.split_at(size);
        let routes =
            route_ports.iter().map(|port| format!("nats-route://127.0.0.1:{port}")).collect::<Vec<_>>().join(", ");
        let cluster_name = format!("npcmem-test-{}", &id[..8]);
        let mut nodes = Vec::with_capacity(size);
        for (index, route_port) in route_ports.iter().enumerate() {
            let name = format!("n{}", index + 1);
            let (client_port, monitor_port) = (other_ports[2 * index], other_ports[2 * index + 1]);
            let store_dir = work_dir.join(&name);
            let config = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{client_port}\nhttp: 127.0.0.1:{monitor_port}\n\
                 jetstream {{\n  store_dir: \"{store}\"\n  max_file_store: 1GB\n}}\n\
                 cluster {{\n  name: {cluster_name}\n  listen: 127.0.0.1:{route_port}\n  routes: [{routes}]\n}}\n",
                store = store_dir.display(),
            );
            let config_path = work_dir.join(format!("{name}.conf"));
            std::fs::write(&config_path, config).expect("write the node's configuration");
            let log_path = work_dir.join(format!("{name}.log"));
            nodes.push(Node { name, client_port, monitor_port, config_path, log_path, child: None });
        }
        let mut cluster = Self { nodes, work_dir };
        for index in 0..size {
            cluster.launch(index);
        }
        for index in 0..size {
            cluster.wait_listening(index).await;
        }
        cluster.wait_healthy(Duration::from_secs(30)).await;
        cluster
    }

    fn launch(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(&node.config_path)
            .arg("-l")
            .arg(&node.log_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("nats-server starts (is it installed?)");
        node.child = Some(child);
    }

    async fn wait_listening(&self, index: usize) {
        let node = &self.nodes[index];
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", node.client_port)).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "NATS node {} did not listen on {}; log at {}",
                node.name,
                node.client_port,
                node.log_path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The client URL of node `index` (0-based).
    pub fn url(&self, index: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[index].client_port)
    }

    /// The `server_name` of node `index` (what stream info reports as leader or replica).
    pub fn name(&self, index: usize) -> &str {
        &self.nodes[index].name
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.name == name)
    }

    /// Whether every running node answers `/healthz` with 200 and they agree on one
    /// JetStream meta leader (a restarted node is healthy once it has caught up).
    pub async fn healthy(&self) -> bool {
        let mut leader: Option<String> = None;
        for node in self.nodes.iter().filter(|node| node.child.is_some()) {
            if !matches!(crate::http_get(node.monitor_port, "/healthz").await, Some((200, _))) {
                return false;
            }
            let Some((200, jsz)) = crate::http_get(node.monitor_port, "/jsz").await else { return false };
            let Ok(jsz) = serde_json::from_str::<serde_json::Value>(&jsz) else { return false };
            let Some(node_leader) = jsz["meta_cluster"]["leader"].as_str().filter(|l| !l.is_empty()) else {
                return false;
            };
            if leader.get_or_insert_with(|| node_leader.to_string()) != node_leader {
                return false;
            }
        }
        true
    }

    /// Waits until [`NatsCluster::healthy`]; panics with the nodes' logs' location after `timeout`.
    pub async fn wait_healthy(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.healthy().await {
            assert!(
                Instant::now() < deadline,
                "the NATS cluster is not healthy after {timeout:?}; logs in {}",
                self.work_dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL node `index` (its store survives on disk).
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            child.kill().await.expect("kill nats-server");
        }
    }

    /// Starts node `index` again on its ports and store, once it listens.
    pub async fn restart(&mut self, index: usize) {
        self.kill(index).await;
        self.launch(index);
        self.wait_listening(index).await;
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.work_dir);
        }
    }
}
