//! Domain types and pure rules of npcmem, shared by every service.
//!
//! - [`wire`]: serde types of every message on the bus.
//! - [`derived_id`]: ids of derived signals and events, from what happened.
//! - [`validate`]: decoding of inbound bytes with dead-letter reason codes.
//! - [`redact`]: real-world PII redaction of text and raw bytes.
//! - [`memory`]: memory kinds, salience, growth caps, rounding.
//! - [`summary`]: working-memory summaries of conversations.
//! - [`tokens`]: BPE token counts for budgets.
//! - [`recall`]: ranking and packing of the verbatim turns a pair exchanged.
//!
//! This crate must stay pure: no I/O, no tokio, no NATS, no SQL, no clock reads (callers
//! pass `now`). That keeps every rule unit-testable and usable from any service, the
//! CLI and the tests alike. It depends on none of our other crates.

pub mod consolidation;
pub mod context;
pub mod derived_id;
pub mod extraction;
pub mod gossip;
pub mod memory;
pub mod perspective;
pub mod recall;
pub mod redact;
pub mod relationship;
pub mod summary;
pub mod tokens;
pub mod validate;
pub mod wire;

pub use memory::{
    EmotionalValence, MEMORY_CAPS, MemoryCaps, MemoryType, SafetyFlag, SalienceInputs, cap_for, clamp_unit,
    compute_salience, round3,
};
pub use redact::{PiiRedactor, RedactionReport, luhn_valid};
pub use summary::{summarize_conversation, truncate_chars};
pub use validate::{ConversationLimits, ReasonCode, ValidationError, decode_conversation_ended, decode_message};
pub use wire::SCHEMA_VERSION;

/// What an allocation of `len` bytes takes from the heap, roughly (glibc's malloc: 8 bytes
/// of header, 16-byte rounding, 32 bytes at least): for weighing what a cache holds.
pub fn heap_bytes(len: usize) -> usize {
    if len == 0 { 0 } else { (len + 8).next_multiple_of(16).max(32) }
}
