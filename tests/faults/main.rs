//! Fault tests a user can run with one command (`cargo test -p npcmem-tests --test
//! faults -- --nocapture`): each prints what it counted, and asserts the counts that
//! must be zero are zero. Real NATS, real Postgres, prefixes and a database per test.

mod malformed;
mod matrix;
