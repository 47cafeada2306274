//! A TCP proxy the test controls, to make Postgres "unreachable" for a while: when down,
//! it drops every open connection and refuses new ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct TcpProxy {
    pub port: u16,
    down: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy port");
        let port = listener.local_addr().expect("bound").port();
        let down = Arc::new(AtomicBool::new(false));
        let (cut, cut_receiver) = watch::channel(0u64);
        let accept_down = down.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { continue };
                if accept_down.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut cut_signal = cut_receiver.clone();
                // Only cuts after this connection was accepted concern it.
                cut_signal.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
                    tokio::select! {
                        _ = copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        Self { port, down, cut, task }
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            self.cut.send_modify(|generation| *generation += 1);
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
