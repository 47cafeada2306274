//! The NATS side of npcmem: the JetStream topology (every stream, subject and durable name
//! comes from [`Topology`]), publishing with `Nats-Msg-Id`, the one batch consumer loop all
//! services use (ack after commit, nak with a delay, dead letters), and the outbox relay.
//! Depends on `npcmem-core`, `npcmem-store` and `npcmem-llm` (to classify their errors);
//! knows nothing of any one service.

pub mod consumer;
pub mod dlq;
pub mod error;
pub mod failure;
pub mod metrics;
pub mod outbox_relay;
pub mod publish;
pub mod retry;
pub mod topology;

pub use consumer::{BatchHandler, ConsumerLoop, ConsumerSettings, Delivery, Disposition};
pub use error::BusError;
pub use failure::{BatchWork, Failure, Outcome, run_batch};
pub use metrics::BusMetrics;
pub use outbox_relay::{OutboxRelay, RelaySettings};
pub use retry::RetryPolicy;
pub use topology::{ConsumerSpec, StreamKind, Topology, TopologySettings};
