//! Graceful shutdown as a value (mini-redis style): whoever holds a receiver stops pulling
//! when it flips to true, finishes its batch, and returns.

use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Shutdown {
    sender: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (sender, _) = watch::channel(false);
        Self { sender: std::sync::Arc::new(sender) }
    }
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.sender.subscribe()
    }
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = match signal(SignalKind::terminate()) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM, only Ctrl-C stops this process");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
