//! The pipeline on a three-node JetStream cluster (`cargo test -p npcmem-tests --test
//! cluster -- --nocapture`): its own nats-server nodes on loopback (NPCMEM_TEST_NATS_SERVER_BIN,
//! else /usr/sbin/nats-server), streams at three replicas, the services as real processes
//! with three extract replicas sharing one durable, a database of its own on the test
//! PostgreSQL (NPCMEM_TEST_DATABASE_URL).

mod failover;
mod pulls;
