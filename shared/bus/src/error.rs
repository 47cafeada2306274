/// Failures of the NATS layer. Every one is transient from a consumer's point of view:
/// the bus being unreachable never makes an input invalid.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("nats connection failed: {0}")]
    Connect(#[from] async_nats::ConnectError),
    #[error("jetstream stream setup failed for {stream}: {message}")]
    Stream { stream: String, message: String },
    #[error("jetstream consumer setup failed for {consumer}: {message}")]
    Consumer { consumer: String, message: String },
    #[error("publish to {subject} failed: {message}")]
    Publish { subject: String, message: String },
    #[error("jetstream request failed: {0}")]
    Request(String),
    #[error("subscribing to {subject} failed: {message}")]
    Subscribe { subject: String, message: String },
}
