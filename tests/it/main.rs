//! One integration-test binary (STYLE §Tests): real NATS, real Postgres, a database and
//! prefixes of its own per test.

mod cli;
mod cli_privacy;
mod consolidate;
mod degraded_auto;
mod deploy_local;
mod enrich;
mod enrich_errors;
mod extract;
mod extract_fidelity;
mod extract_llm;
mod front_door;
mod gossip;
mod ingest;
mod ingest_faults;
mod nats_permissions;
mod outbox_relay;
mod recall;
mod recall_embed;
mod refused;
mod relate;
mod sdk;
mod service_http;
mod store_queries;
mod traces;
