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

/// The body of every service's `main`: sets up tracing, builds the runtime, triggers
/// `shutdown` on SIGTERM/SIGINT, runs the service, and turns its result into an exit
/// code (0 after a graceful shutdown, 1 with the error logged otherwise).
pub fn run_main<F, Fut>(telemetry: crate::telemetry::Telemetry, service: F) -> std::process::ExitCode
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: std::future::Future<Output = Result<(), crate::ServiceError>>,
{
    // Dropped last, after the runtime: flushes the spans still buffered.
    let _telemetry = crate::telemetry::init(&telemetry);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let shutdown = Shutdown::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            on_signal.trigger();
        });
        service(shutdown).await
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "service failed");
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
