//! Serde types for every message of docs/wire-protocol.md, game-facing and internal.
//!
//! Forward compatibility: unknown fields are ignored everywhere (no
//! `deny_unknown_fields`), and a missing `schema_version` on an inbound message means 1.
//! Inbound bytes from a game server should be decoded through [`crate::validate`],
//! which turns every violation into a dead-letter reason code; the plain serde impls
//! here are what services use for messages they produce themselves.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use crate::memory::{EmotionalValence, MemoryType, SafetyFlag};

/// The only payload version this code reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Serde default for `schema_version`: a message without one is version 1.
pub fn schema_v1() -> u32 {
    SCHEMA_VERSION
}

// ---------------------------------------------------------------------------
// conversation.ended (game server → ingest)
// ---------------------------------------------------------------------------

/// P.conversation.ended (default npcmem.conversation.ended), stream <STREAM_PREFIX>_CONVERSATIONS (work queue). A
/// finished player-NPC conversation: game server -> ingest (durable <STREAM_PREFIX>_ingest). Set the header
/// Nats-Msg-Id to conversation_id. Rust type: npcmem_core::wire::ConversationEnded, decoded by
/// npcmem_core::validate::decode_conversation_ended. Limits shown are the defaults; ingest can be configured with
/// other values (NPCMEM_MAX_MESSAGES, NPCMEM_MAX_MESSAGE_CHARS, NPCMEM_MAX_PAYLOAD_BYTES, NPCMEM_MAX_NAME_CHARS).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("$comment" = "Checked in this order, first failure wins: payload size > 65536 bytes (payload_too_large), UTF-8 (invalid_utf8), JSON object (invalid_json), schema_version, then the fields in a fixed order (ids, npc, player, location, timestamps, messages). The payload size limit and ended_at >= started_at cannot be expressed here."))]
pub struct ConversationEnded {
    /// Payload version. Only 1 exists; absent or null means 1. Any other value is dead-lettered with reason
    /// schema_version.
    #[serde(default = "schema_v1")]
    #[schemars(extend("enum" = [1, null], "type" = ["integer", "null"]))]
    pub schema_version: u32,
    /// Natural key of the conversation; also its Nats-Msg-Id. A second message with the same id is acknowledged and
    /// ignored.
    #[schemars(extend("not" = {"const": "00000000-0000-0000-0000-000000000000"}))]
    pub conversation_id: Uuid,
    /// A UUID string, not the nil UUID. Absent or null -> missing_field; not a string, not a UUID, or nil ->
    /// invalid_uuid. (The decoder also accepts the simple, braced and urn:uuid forms; send the hyphenated form.)
    #[schemars(extend("not" = {"const": "00000000-0000-0000-0000-000000000000"}))]
    pub npc_id: Uuid,
    /// A UUID string, not the nil UUID. Absent or null -> missing_field; not a string, not a UUID, or nil ->
    /// invalid_uuid. (The decoder also accepts the simple, braced and urn:uuid forms; send the hyphenated form.)
    #[schemars(extend("not" = {"const": "00000000-0000-0000-0000-000000000000"}))]
    pub player_id: Uuid,
    /// The NPC side. Names, roles and factions are game data: stored as sent, never redacted. Not an object ->
    /// invalid_field.
    pub npc: NpcInfo,
    /// The player side. Not an object -> invalid_field.
    pub player: PlayerInfo,
    /// Optional room or place name; at most 200 chars, no NUL -> else invalid_field. PII patterns in it are redacted
    /// before it is stored.
    #[serde(default)]
    #[schemars(length(max = 200), regex(pattern = r"^[^\u0000]*$"))]
    pub location: Option<String>,
    /// RFC 3339 timestamp with an offset (Z or +hh:mm), normalised to UTC; otherwise invalid_field.
    pub started_at: DateTime<Utc>,
    /// RFC 3339 timestamp; must not be before started_at (invalid_field). Not expressible in JSON Schema.
    pub ended_at: DateTime<Utc>,
    /// The transcript, 1 to 200 entries. More than 200 -> too_many_messages (checked before anything else in the
    /// list); empty or not an array -> invalid_field.
    #[schemars(length(min = 1, max = 200))]
    pub messages: Vec<TranscriptMessage>,
}

/// The NPC side of a conversation. Names, roles and factions are game data, not PII.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NpcInfo {
    /// Character or player name: 1 to 100 chars with at least one non-whitespace char and no NUL; otherwise
    /// invalid_field (absent or null -> missing_field).
    #[schemars(length(max = 100), regex(pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"))]
    pub name: String,
    /// Optional; at most 100 chars (the name limit), no NUL -> else invalid_field.
    #[serde(default)]
    #[schemars(length(max = 100), regex(pattern = r"^[^\u0000]*$"))]
    pub role: Option<String>,
    /// Optional (absent or null = none). At most 32 entries, each a non-blank string of at most 100 chars without
    /// NUL; otherwise invalid_field.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 100), regex(pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$")))]
    pub factions: Vec<String>,
}

/// The player side of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlayerInfo {
    /// Character or player name: 1 to 100 chars with at least one non-whitespace char and no NUL; otherwise
    /// invalid_field (absent or null -> missing_field).
    #[schemars(length(max = 100), regex(pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"))]
    pub name: String,
    /// Optional (absent or null = none). At most 32 entries, each a non-blank string of at most 100 chars without
    /// NUL; otherwise invalid_field.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 100), regex(pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$")))]
    pub factions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TranscriptMessage {
    /// Exactly 'player' or 'npc' (case-sensitive); other values -> invalid_field.
    pub speaker: Speaker,
    /// At most 4000 chars (Unicode scalar values, not bytes) -> else text_too_long; no NUL -> else invalid_field. May
    /// be empty. PII patterns are redacted before storage.
    #[schemars(length(max = 4000), regex(pattern = r"^[^\u0000]*$"))]
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    Player,
    Npc,
}

impl Speaker {
    pub fn as_str(&self) -> &'static str {
        match self {
            Speaker::Player => "player",
            Speaker::Npc => "npc",
        }
    }
}

// ---------------------------------------------------------------------------
// Jobs and privacy
// ---------------------------------------------------------------------------

/// P.job.extract, stream <STREAM_PREFIX>_JOBS (work queue). Internal: ingest -> extract, published through the
/// outbox with Nats-Msg-Id = conversation_id. Consumed by extract (durable <STREAM_PREFIX>_extract). Rust type:
/// npcmem_core::wire::ExtractJob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtractJob {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub conversation_id: Uuid,
}

/// P.job.consolidate, stream <STREAM_PREFIX>_JOBS (work queue). Internal: the consolidate service's consolidate
/// job (scheduled, or npcmem consolidate run consolidate) -> consolidate workers (durable
/// <STREAM_PREFIX>_consolidate, shared by the replicas), one per pair with a cluster, through the outbox;
/// Nats-Msg-Id = consolidate-<npc_id>-<player_id>-<run time in Unix seconds>. Rust type:
/// npcmem_core::wire::ConsolidateJob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConsolidateJob {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub npc_id: Uuid,
    pub player_id: Uuid,
}

/// P.world.player_privacy, stream <STREAM_PREFIX>_WORLD (limits, 7 days). A player opted in or out of NPC memory:
/// game server -> ingest (durable <STREAM_PREFIX>_ingest-privacy). For one player the message with the newest
/// `at` wins, whatever the arrival order. Rust type: npcmem_core::wire::PlayerPrivacy, decoded by
/// npcmem_core::validate::decode_message (same envelope checks and 64 KiB default size limit as
/// conversation.ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlayerPrivacy {
    /// Payload version. Only 1 exists; absent or null means 1. Any other value is dead-lettered with reason
    /// schema_version.
    #[serde(default = "schema_v1")]
    #[schemars(extend("enum" = [1, null], "type" = ["integer", "null"]))]
    pub schema_version: u32,
    /// Absent or null -> missing_field; not a UUID -> invalid_uuid.
    pub player_id: Uuid,
    /// false: later conversations of this player are recorded as skipped (no transcript, no memories); true:
    /// recording resumes. Not a boolean -> invalid_field.
    pub allow_memory: bool,
    /// When the player made the choice; orders competing updates. Not a timestamp -> invalid_field.
    pub at: DateTime<Utc>,
}

// ---------------------------------------------------------------------------
// Core NATS notifications (no stream, best effort)
// ---------------------------------------------------------------------------

/// P.cache.invalidate, core NATS (no stream, best effort). Internal: writers (extract, relate, consolidate,
/// gossip and the npcmem admin commands) -> every enrich replica (plain subscription, no queue group). null (or
/// absent) on a side means every pair on that side. Carries no schema_version. Rust type:
/// npcmem_core::wire::CacheInvalidate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CacheInvalidate {
    #[serde(default)]
    pub npc_id: Option<Uuid>,
    #[serde(default)]
    pub player_id: Option<Uuid>,
}

/// P.control.changed, core NATS (no stream, best effort). Internal: `npcmem switch set`, and the error-budget
/// monitor of an enrich or extract replica when the automatic degraded mode enters or leaves, announce that a
/// runtime switch (degraded, gossip_enabled, consolidation_enabled) changed, after its commit; the gossip leader (at its
/// next tick) and every enrich replica re-read the runtime_switches table (without the message, within 5 s;
/// consolidate reads the table at every scheduler poll). Carries no schema_version. Rust type:
/// npcmem_core::wire::ControlChanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControlChanged {
    /// Switch name, e.g. degraded or gossip.
    pub switch: String,
    /// Any JSON value; default null.
    #[serde(default)]
    pub value: serde_json::Value,
}

// ---------------------------------------------------------------------------
// Events (EVENTS stream)
// ---------------------------------------------------------------------------

/// Which extractor produced a batch of memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExtractorKind {
    Llm,
    Rules,
}

impl ExtractorKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ExtractorKind::Llm => "llm",
            ExtractorKind::Rules => "rules",
        }
    }
}

/// P.event.memory.stored, stream <STREAM_PREFIX>_EVENTS (limits, 7 days). Internal: extract -> relate (durable
/// <STREAM_PREFIX>_relate) and gossip (durable <STREAM_PREFIX>_gossip-learn), through extract's outbox;
/// Nats-Msg-Id = event_id. Sent once per conversation, also with an empty memories list. Rust type:
/// npcmem_core::wire::MemoryStored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryStored {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub event_id: Uuid,
    pub conversation_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// Default [].
    #[serde(default)]
    pub npc_factions: Vec<String>,
    /// Default [].
    #[serde(default)]
    pub player_factions: Vec<String>,
    pub extractor: ExtractorKind,
    pub ended_at: DateTime<Utc>,
    /// Default [].
    #[serde(default)]
    pub memories: Vec<StoredMemory>,
    /// The NPC's name, which {npc} in a memory's statement stands for. Absent from events written before perspective
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npc_name: Option<String>,
    /// The player's name, which {player} in a memory's statement stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub player_name: Option<String>,
}

/// One memory as carried by `event.memory.stored`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoredMemory {
    pub id: Uuid,
    pub memory_type: MemoryType,
    pub content: String,
    /// Default [].
    #[serde(default)]
    pub tags: Vec<String>,
    pub importance: f64,
    pub confidence: f64,
    /// Default neutral.
    #[serde(default)]
    pub emotional_valence: EmotionalValence,
    /// Default 0.
    #[serde(default)]
    pub emotional_intensity: f64,
    /// Default clean.
    #[serde(default)]
    pub safety_flag: SafetyFlag,
    /// Who did it: the player's or the NPC's id. Absent when someone else did, or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<Uuid>,
    /// To whom: the player's or the NPC's id. Absent when to someone else or to no one, or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_id: Option<Uuid>,
    /// The memory with {player} and {npc} for the two parties, so whoever it is told to reads it from their own side
    /// (content is it as the NPC remembers it). Absent for free-text LLM memories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// The six relationship dimensions (each in [0, 1]) and the stage at one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RelationshipSnapshot {
    pub trust: f64,
    pub fear: f64,
    pub respect: f64,
    pub loyalty: f64,
    pub friendliness: f64,
    pub romantic_interest: f64,
    /// stranger, acquaintance, friend, close_friend, trusted_ally, rival or enemy; a plain string in Rust.
    pub stage: String,
}

/// P.event.relationship.changed, stream <STREAM_PREFIX>_EVENTS (limits, 7 days). Internal: relate -> anyone (no
/// npcmem service consumes it), one per applied conversation, through relate's outbox; Nats-Msg-Id = event_id.
/// Rust type: npcmem_core::wire::RelationshipChanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RelationshipChanged {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub event_id: Uuid,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// The conversation that caused the change; null for admin changes.
    #[serde(default)]
    pub conversation_id: Option<Uuid>,
    /// The relationship row's version after the change.
    pub version: i64,
    /// The six dimensions (each in [0, 1]) and the stage. Rust type: npcmem_core::wire::RelationshipSnapshot.
    pub old: RelationshipSnapshot,
    /// The six dimensions (each in [0, 1]) and the stage. Rust type: npcmem_core::wire::RelationshipSnapshot.
    pub new: RelationshipSnapshot,
}

/// P.event.knowledge.learned, stream <STREAM_PREFIX>_EVENTS (limits, 7 days). Internal: gossip -> anyone (no
/// npcmem service consumes it), one per fact stored, through gossip's outbox; Nats-Msg-Id = event_id (the fact's
/// id). Rust type: npcmem_core::wire::KnowledgeLearned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeLearned {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub event_id: Uuid,
    /// The NPC who now knows the fact (the listener).
    pub npc_id: Uuid,
    /// The knowledge fact as gossip stores it: id, origin_fact_id, category, subject_id, content, tags, confidence,
    /// importance, hop_count, provenance, source, source_memory_id, expires_at, and contradicted (the held facts of
    /// the same NPC this one revised: [{fact_id, outcome: superseded|doubted, confidence: the doubted fact's new
    /// value or null}]). Untyped in Rust (serde_json::Value) so its shape can evolve with the gossip service;
    /// required, but any JSON value is accepted.
    pub fact: serde_json::Value,
    /// The speaker when learned through gossip; null for observations and authored facts.
    #[serde(default)]
    pub from_npc_id: Option<Uuid>,
}

// ---------------------------------------------------------------------------
// Story signals (SIGNALS stream, read by game servers)
// ---------------------------------------------------------------------------

/// `signal_type` values; the subject is `P.signal.<signal_type>`.
pub mod signal_type {
    pub const RELATIONSHIP_CHANGED: &str = "relationship_changed";
    pub const SECRET_LEARNED: &str = "secret_learned";
    pub const MEMORY_MILESTONE: &str = "memory_milestone";
    pub const FACTION_REPUTATION_SHIFT: &str = "faction_reputation_shift";
    pub const ALL: [&str; 4] = [RELATIONSHIP_CHANGED, SECRET_LEARNED, MEMORY_MILESTONE, FACTION_REPUTATION_SHIFT];
}

/// `event_type` values of a `relationship_changed` signal: the seed's
/// §MemoryEventBridge thresholds plus a stage change.
pub mod relationship_event_type {
    /// trust < 0.2
    pub const NPC_HOSTILE: &str = "npc_hostile";
    /// trust > 0.8
    pub const NPC_TRUSTED_ALLY: &str = "npc_trusted_ally";
    /// fear > 0.7
    pub const NPC_COWERED: &str = "npc_cowered";
    /// respect > 0.8
    pub const NPC_RESPECT: &str = "npc_respect";
    /// friendliness > 0.9
    pub const NPC_BEST_FRIEND: &str = "npc_best_friend";
    /// friendliness < 0.1
    pub const NPC_DESPISE: &str = "npc_despise";
    pub const STAGE_CHANGED: &str = "stage_changed";
}

/// P.signal.<signal_type> (e.g. npcmem.signal.relationship_changed), stream <STREAM_PREFIX>_SIGNALS (limits, 30
/// days). Story signal: relate, gossip -> game servers; Nats-Msg-Id = signal_id. relate emits
/// relationship_changed, memory_milestone and faction_reputation_shift; gossip emits secret_learned; each through
/// its service's outbox. Deduplicate by signal_id; order the signals of one NPC-player pair by version. Fields a
/// signal type does not use are null; fields specific to one type (e.g. a faction name) are extra top-level
/// properties. Rust type: npcmem_core::wire::Signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Signal {
    /// Payload version, always 1 in messages npcmem produces.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    /// Unique id; also the Nats-Msg-Id. Deduplicate by it.
    pub signal_id: Uuid,
    /// Also the last subject token. Known values: relationship_changed, secret_learned, memory_milestone,
    /// faction_reputation_shift. A plain string in Rust: ignore types you do not know.
    pub signal_type: String,
    /// For relationship_changed: npc_hostile (trust < 0.2), npc_trusted_ally (trust > 0.8), npc_cowered (fear > 0.7),
    /// npc_respect (respect > 0.8), npc_best_friend (friendliness > 0.9), npc_despise (friendliness < 0.1) or
    /// stage_changed. A plain string in Rust.
    #[serde(default)]
    pub event_type: Option<String>,
    pub npc_id: Uuid,
    #[serde(default)]
    pub player_id: Option<Uuid>,
    /// The relationship dimension that crossed a threshold, e.g. trust.
    #[serde(default)]
    pub dimension: Option<String>,
    #[serde(default)]
    pub old_value: Option<f64>,
    #[serde(default)]
    pub new_value: Option<f64>,
    /// The relationship stage after the change.
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default)]
    pub conversation_id: Option<Uuid>,
    /// The relationship version; order one pair's signals by it.
    #[serde(default)]
    pub version: Option<i64>,
    pub at: DateTime<Utc>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

// ---------------------------------------------------------------------------
// World messages (game server → gossip)
// ---------------------------------------------------------------------------

/// What a knowledge fact is about, used by observations and authored facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KnowledgeCategory {
    PlayerTrait,
    WorldEvent,
    LocationInfo,
    NpcGossip,
    FactionIntel,
}

impl KnowledgeCategory {
    pub const ALL: [KnowledgeCategory; 5] = [
        KnowledgeCategory::PlayerTrait,
        KnowledgeCategory::WorldEvent,
        KnowledgeCategory::LocationInfo,
        KnowledgeCategory::NpcGossip,
        KnowledgeCategory::FactionIntel,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            KnowledgeCategory::PlayerTrait => "player_trait",
            KnowledgeCategory::WorldEvent => "world_event",
            KnowledgeCategory::LocationInfo => "location_info",
            KnowledgeCategory::NpcGossip => "npc_gossip",
            KnowledgeCategory::FactionIntel => "faction_intel",
        }
    }

    pub fn parse(text: &str) -> Option<KnowledgeCategory> {
        KnowledgeCategory::ALL.into_iter().find(|category| category.as_str() == text)
    }
}

/// P.world.npc_moved, stream <STREAM_PREFIX>_WORLD (limits, 7 days). An NPC changed rooms: game server -> gossip.
/// Consumed by gossip (durable gossip-world); a message that breaks a limit here is dead-lettered alone on
/// P.dlq.gossip-world (invalid_field, invalid_uuid or text_too_long) while the rest of its batch is applied. Rust
/// type: npcmem_core::wire::NpcMoved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NpcMoved {
    /// Payload version. Only 1 exists; absent means 1.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub npc_id: Uuid,
    /// The game's own room id: 1-200 chars, not blank.
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    pub room_id: String,
    pub at: DateTime<Utc>,
}

/// P.world.npc_profile, stream <STREAM_PREFIX>_WORLD (limits, 7 days). Who an NPC is and what drives its gossip:
/// game server -> gossip. Consumed by gossip (durable gossip-world); a message that breaks a limit here is
/// dead-lettered alone on P.dlq.gossip-world (invalid_field, invalid_uuid or text_too_long) while the rest of its
/// batch is applied. Rust type: npcmem_core::wire::NpcProfile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NpcProfile {
    /// Payload version. Only 1 exists; absent means 1.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub npc_id: Uuid,
    #[schemars(length(min = 1, max = 100), regex(pattern = r"\S"))]
    pub name: String,
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub role: Option<String>,
    /// Default []. The NPC's factions from the profile with the latest timestamp win.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 100), regex(pattern = r"\S")))]
    pub factions: Vec<String>,
    /// Gossip motivations, each expected in [0, 1]; a missing drive is 0.5. null or absent keeps the NPC's current
    /// drives (defaults for a new NPC).
    #[serde(default)]
    pub drives: Option<Drives>,
    /// Emotional state.
    #[serde(default)]
    pub mood: Option<Mood>,
    /// When the game produced the profile; absent or null means when NPCMEM_WORLD stored the message (the same on
    /// every redelivery). The latest wins.
    #[serde(default)]
    pub at: Option<DateTime<Utc>>,
}

/// Gossip motivations, each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Drives {
    /// Default 0.5.
    #[serde(default = "half")]
    pub social: f64,
    /// Default 0.5.
    #[serde(default = "half")]
    pub safety: f64,
    /// Default 0.5.
    #[serde(default = "half")]
    pub loyalty: f64,
    /// Default 0.5.
    #[serde(default = "half")]
    pub curiosity: f64,
}

fn half() -> f64 {
    0.5
}

impl Default for Drives {
    /// A neutral NPC: every drive at 0.5.
    fn default() -> Self {
        Drives { social: 0.5, safety: 0.5, loyalty: 0.5, curiosity: 0.5 }
    }
}

/// An NPC's emotional state. `mood` is one of the usual moods (happy, excited, calm,
/// anxious, angry, fearful, sad, suspicious, confident, neutral) but kept as a string so
/// a game's own moods pass through to the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Mood {
    /// One of the usual moods (happy, excited, calm, anxious, angry, fearful, sad, suspicious, confident, neutral) or
    /// the game's own: any string of 1-100 chars, not blank.
    #[schemars(length(min = 1, max = 100), regex(pattern = r"\S"))]
    pub mood: String,
    /// Expected in [0, 1]; default 0.
    #[serde(default)]
    pub intensity: f64,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// P.world.observation, stream <STREAM_PREFIX>_WORLD (limits, 7 days). Something NPCs witnessed: game server ->
/// gossip. Consumed by gossip (durable gossip-world); a message that breaks a limit here is dead-lettered alone
/// on P.dlq.gossip-world (invalid_field, invalid_uuid or text_too_long) while the rest of its batch is applied.
/// Rust type: npcmem_core::wire::Observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Observation {
    /// Payload version. Only 1 exists; absent means 1.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    /// Natural key of the observation.
    pub observation_id: Uuid,
    /// The NPCs who saw it. Not the nil UUID.
    pub witness_ids: Vec<Uuid>,
    /// Who or what it is about, if anyone.
    #[serde(default)]
    pub subject_id: Option<Uuid>,
    /// Knowledge category.
    pub category: KnowledgeCategory,
    /// The fact, 1-2000 chars, not blank (text_too_long beyond 2000).
    #[schemars(length(min = 1, max = 2000), regex(pattern = r"\S"))]
    pub content: String,
    /// Default []. At most 32, each 1-100 chars, not blank.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 100), regex(pattern = r"\S")))]
    pub tags: Vec<String>,
    /// Expected in [0, 1].
    pub importance: f64,
    pub at: DateTime<Utc>,
}

/// P.world.fact, stream <STREAM_PREFIX>_WORLD (limits, 7 days). An authored fact that some NPCs know: game server
/// -> gossip. Consumed by gossip (durable gossip-world); a message that breaks a limit here is dead-lettered
/// alone on P.dlq.gossip-world (invalid_field, invalid_uuid or text_too_long) while the rest of its batch is
/// applied. Rust type: npcmem_core::wire::WorldFact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorldFact {
    /// Payload version. Only 1 exists; absent means 1.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    /// Natural key of the fact.
    pub fact_id: Uuid,
    /// The NPCs who know it. Not the nil UUID.
    pub npc_ids: Vec<Uuid>,
    #[serde(default)]
    pub subject_id: Option<Uuid>,
    /// Knowledge category.
    pub category: KnowledgeCategory,
    /// The fact, 1-2000 chars, not blank (text_too_long beyond 2000).
    #[schemars(length(min = 1, max = 2000), regex(pattern = r"\S"))]
    pub content: String,
    /// Default []. At most 32, each 1-100 chars, not blank.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 100), regex(pattern = r"\S")))]
    pub tags: Vec<String>,
    /// Expected in [0, 1].
    pub importance: f64,
    /// Expected in [0, 1]; default 1.0 (authored facts are certain).
    #[serde(default = "full_confidence")]
    pub confidence: f64,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

fn full_confidence() -> f64 {
    1.0
}

// ---------------------------------------------------------------------------
// query.* (game server → enrich): numbers, not prose
// ---------------------------------------------------------------------------

/// `P.query.relationship`: one pair's relationship as numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RelationshipQuery {
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub npc_id: Uuid,
    pub player_id: Uuid,
}

/// The reply to `P.query.relationship`; a pair that never met gets the initial values
/// (with the faction modifier) and `has_met: false`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RelationshipAnswer {
    pub npc_id: Uuid,
    pub player_id: Uuid,
    pub has_met: bool,
    pub stage: String,
    pub disposition: f64,
    pub trust: f64,
    pub fear: f64,
    pub respect: f64,
    pub loyalty: f64,
    pub friendliness: f64,
    pub romantic_interest: f64,
    pub interaction_count: i32,
    pub version: i64,
}

/// `P.query.memories`: a pair's memories, filtered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoriesQuery {
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// All must match.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub min_importance: Option<f64>,
    #[serde(default)]
    pub memory_type: Option<MemoryType>,
    /// Case-insensitive substring of the content.
    #[serde(default)]
    pub contains: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// The reply to `P.query.memories`: `count` before the limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoriesAnswer {
    pub count: i64,
    pub has_memory_matching: bool,
    pub memories: Vec<MemoryItem>,
}

/// One memory in a [`MemoriesAnswer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryItem {
    pub id: Uuid,
    pub memory_type: MemoryType,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub locked: bool,
    pub created_at: DateTime<Utc>,
}

/// `P.query.knowledge`: what an NPC knows, by tag or subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeQuery {
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub npc_id: Uuid,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub subject_id: Option<Uuid>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// The reply to `P.query.knowledge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeAnswer {
    pub knows_fact: bool,
    pub facts: Vec<KnowledgeFact>,
}

/// `P.query.recall`: search one pair's past turns by text, time and speaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecallQuery {
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// Words to search for; without it the newest turns come first.
    #[serde(default)]
    pub text: Option<String>,
    /// Said at or after (RFC 3339).
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    /// Said at or before (RFC 3339).
    #[serde(default)]
    pub to: Option<DateTime<Utc>>,
    /// `player` or `npc`.
    #[serde(default)]
    pub speaker: Option<Speaker>,
    /// 1..=200, default 20.
    #[serde(default)]
    pub limit: Option<i64>,
}

/// The reply to `P.query.recall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecallAnswer {
    /// Turns that matched (before the limit).
    pub count: usize,
    pub turns: Vec<RecalledTurn>,
    /// `embedder` when the question could not be embedded: the ranking is lexical only.
    pub degraded: Vec<String>,
}

/// One turn in a [`RecallAnswer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecalledTurn {
    pub conversation_id: Uuid,
    /// Position in its conversation, from 0.
    pub turn: u32,
    pub speaker: Speaker,
    pub text: String,
    pub said_at: DateTime<Utc>,
    /// BM25 relevance to `text`; null when no text was given.
    pub score: Option<f64>,
}

/// A knowledge fact in a [`KnowledgeAnswer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeFact {
    pub id: Uuid,
    pub category: String,
    pub subject_id: Option<Uuid>,
    pub content: String,
    pub tags: Vec<String>,
    pub confidence: f64,
    pub importance: f64,
    /// `witnessed`, `gossip`, `world` or `conversation`.
    pub source: String,
    /// How the fact reads in its holder's prompt: its own experience, or heard from whom
    /// and how far believed.
    pub told: String,
}

impl RecallQuery {
    /// The query's own mistakes, named by field.
    pub fn check(&self) -> Result<(), ErrorReply> {
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from > to
        {
            return Err(ErrorReply::at_field("invalid_field", "from", format!("from ({from}) is after to ({to})")));
        }
        if let Some(limit) = self.limit
            && !(1..=200).contains(&limit)
        {
            return Err(ErrorReply::at_field("invalid_field", "limit", format!("limit {limit} is outside 1..=200")));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Enrich (core NATS request/reply and POST /v1/context)
// ---------------------------------------------------------------------------

/// P.enrich.request, core NATS request/reply (queue group enrich), also HTTP POST /v1/context. Prompt context for
/// the NPC's next reply: game server -> enrich. The reply is enrich.reply or error-reply. Rust type:
/// npcmem_core::wire::EnrichRequest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnrichRequest {
    /// Payload version. Only 1 exists; absent means 1.
    #[serde(default = "schema_v1")]
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// The player's current message, used to rank memories by relevance.
    #[serde(default)]
    pub message: Option<String>,
    /// Total context token budget; null lets enrich use its default.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// NPC persona. Rust type: npcmem_core::wire::Persona.
    #[serde(default)]
    pub npc: Option<Persona>,
    /// Prompt template with {reputation}, {memory_context}, ... placeholders.
    #[serde(default)]
    pub template: Option<String>,
}

/// The NPC persona fields of the seed's `PromptBuilder.build_system_prompt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Persona {
    pub name: String,
    #[serde(default)]
    pub role: Option<String>,
    /// Default empty.
    #[serde(default)]
    pub personality: String,
    /// Default empty.
    #[serde(default)]
    pub speaking_style: String,
    /// Default [].
    #[serde(default)]
    pub knowledge_domains: Vec<String>,
    /// Default [].
    #[serde(default)]
    pub secret_knowledge: Vec<String>,
    /// Default [].
    #[serde(default)]
    pub will_discuss: Vec<String>,
    /// Default [].
    #[serde(default)]
    pub wont_discuss: Vec<String>,
}

/// Reply to enrich.request from the enrich service; also the 200 body of HTTP POST /v1/context. Every field has a
/// default when absent. Carries no schema_version. Rust type: npcmem_core::wire::EnrichReply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnrichReply {
    /// Default [].
    #[serde(default)]
    pub sections: Vec<ContextSection>,
    /// Placeholder values (reputation, memory_context), keys sorted. Default {}.
    #[serde(default)]
    pub placeholders: BTreeMap<String, String>,
    /// Rendered system prompt when the request carried a persona.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Default 0.
    #[serde(default)]
    pub token_count: u32,
    /// Providers that timed out or failed and were left out, and embedder when the message could not be embedded
    /// (recall is then lexical). Default [].
    #[serde(default)]
    pub degraded: Vec<String>,
    /// Default 0.
    #[serde(default)]
    pub elapsed_us: u64,
}

/// One context provider's contribution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextSection {
    /// relationship, working_memory, memory, recall, knowledge, mood
    pub provider: String,
    pub content: String,
    pub token_count: u32,
}

/// Error reply of every request/reply endpoint of the enrich service (enrich.request, query.relationship,
/// query.memories, query.knowledge), also the 400 body of HTTP POST /v1/context:
/// {"error":{"code","message","field"}}. Rust type: npcmem_core::wire::ErrorReply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorReply {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// Machine-readable code.
    pub code: String,
    /// For humans.
    pub message: String,
    /// Path of the offending field (npc.name, messages[2].text), when one field is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ErrorReply {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorReply { error: ErrorBody { code: code.into(), message: message.into(), field: None } }
    }

    pub fn at_field(code: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorReply { error: ErrorBody { code: code.into(), message: message.into(), field: Some(field.into()) } }
    }
}

impl From<crate::validate::ValidationError> for ErrorReply {
    fn from(error: crate::validate::ValidationError) -> Self {
        ErrorReply {
            error: ErrorBody { code: error.code.as_str().to_owned(), message: error.message, field: error.field },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T>(value: &T) -> T
    where
        T: Serialize + serde::de::DeserializeOwned,
    {
        let json = serde_json::to_string(value).expect("serialises");
        serde_json::from_str(&json).expect("deserialises its own output")
    }

    #[test]
    fn conversation_ended_matches_the_design_example() {
        let payload = json!({
            "schema_version": 1,
            "conversation_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "npc": {"name": "Brom", "role": "blacksmith", "factions": ["smiths_guild"]},
            "player": {"name": "Aria", "factions": ["thieves_guild"]},
            "location": "Market Square",
            "started_at": "2025-06-01T12:00:00Z",
            "ended_at": "2025-06-01T12:05:00Z",
            "messages": [
                {"speaker": "player", "text": "I need a sword."},
                {"speaker": "npc", "text": "..."}
            ],
            "some_future_field": {"ignored": true}
        });
        let conversation: ConversationEnded = serde_json::from_value(payload).expect("design example decodes");
        assert_eq!(conversation.npc.role.as_deref(), Some("blacksmith"));
        assert_eq!(conversation.messages[0].speaker, Speaker::Player);
        assert_eq!(conversation.messages[1].speaker, Speaker::Npc);
        assert_eq!(round_trip(&conversation), conversation);

        let json = serde_json::to_value(&conversation).expect("serialises");
        assert_eq!(json["messages"][1]["speaker"], "npc");
    }

    #[test]
    fn missing_schema_version_means_one() {
        let job: ExtractJob =
            serde_json::from_str(r#"{"conversation_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10"}"#).expect("decodes");
        assert_eq!(job.schema_version, 1);
    }

    #[test]
    fn memory_stored_uses_lowercase_enums() {
        let payload = json!({
            "schema_version": 1,
            "event_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "conversation_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "npc_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "player_id": "3e0b7d85-9c3b-4fad-8074-6c5d4f2b1e43",
            "npc_factions": ["smiths_guild"],
            "player_factions": [],
            "extractor": "rules",
            "ended_at": "2025-06-01T12:05:00Z",
            "memories": [{
                "id": "4f1c8e96-ad4c-4b0e-9185-7d6e5a3c2f54",
                "memory_type": "episodic",
                "content": "Aria bought a sword",
                "tags": ["trade"],
                "importance": 0.4,
                "confidence": 0.9,
                "emotional_valence": "neutral",
                "emotional_intensity": 0.1,
                "safety_flag": "clean"
            }]
        });
        let event: MemoryStored = serde_json::from_value(payload.clone()).expect("decodes");
        assert_eq!(event.extractor, ExtractorKind::Rules);
        assert_eq!(event.memories[0].memory_type, MemoryType::Episodic);
        assert_eq!(serde_json::to_value(&event).expect("serialises"), payload);
    }

    #[test]
    fn signal_keeps_type_specific_fields_in_extra() {
        let payload = json!({
            "schema_version": 1,
            "signal_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "signal_type": "faction_reputation_shift",
            "event_type": null,
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "dimension": null,
            "old_value": 0.2,
            "new_value": 0.3,
            "stage": null,
            "conversation_id": null,
            "version": null,
            "at": "2025-06-01T12:05:00Z",
            "faction": "smiths_guild"
        });
        let signal: Signal = serde_json::from_value(payload.clone()).expect("decodes");
        assert_eq!(signal.extra.get("faction"), Some(&json!("smiths_guild")));
        assert_eq!(signal.new_value, Some(0.3));
        assert_eq!(serde_json::to_value(&signal).expect("serialises"), payload);
    }

    #[test]
    fn relationship_signal_matches_the_design_example() {
        let payload = json!({
            "schema_version": 1,
            "signal_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "signal_type": "relationship_changed",
            "event_type": "npc_hostile",
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "dimension": "trust",
            "old_value": 0.23,
            "new_value": 0.18,
            "stage": "enemy",
            "conversation_id": "3e0b7d85-9c3b-4fad-8074-6c5d4f2b1e43",
            "at": "2025-06-01T12:05:00Z"
        });
        let signal: Signal = serde_json::from_value(payload).expect("decodes");
        assert_eq!(signal.event_type.as_deref(), Some(relationship_event_type::NPC_HOSTILE));
        assert_eq!(signal.version, None);
        assert!(signal.extra.is_empty());
        assert_eq!(round_trip(&signal), signal);
    }

    #[test]
    fn world_messages_match_the_design_examples() {
        let profile: NpcProfile = serde_json::from_value(json!({
            "schema_version": 1,
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "name": "Tobin", "role": "stable boy", "factions": [],
            "drives": {"social": 0.8, "safety": 0.3, "loyalty": 0.5, "curiosity": 0.6},
            "mood": {"mood": "anxious", "intensity": 0.6, "expires_at": "2025-06-01T13:00:00Z"}
        }))
        .expect("profile decodes");
        assert_eq!(profile.drives.map(|drives| drives.social), Some(0.8));
        assert_eq!(profile.mood.as_ref().map(|mood| mood.mood.as_str()), Some("anxious"));
        assert_eq!(round_trip(&profile), profile);

        let observation: Observation = serde_json::from_value(json!({
            "schema_version": 1,
            "observation_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "witness_ids": ["1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21"],
            "subject_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "category": "world_event", "content": "Bandits raided the mill",
            "tags": ["bandits"], "importance": 0.8, "at": "2025-06-01T12:05:00Z"
        }))
        .expect("observation decodes");
        assert_eq!(observation.category, KnowledgeCategory::WorldEvent);
        assert_eq!(round_trip(&observation), observation);

        let fact: WorldFact = serde_json::from_value(json!({
            "schema_version": 1,
            "fact_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
            "npc_ids": ["1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21"],
            "subject_id": null, "category": "location_info",
            "content": "The cave has treasure", "tags": ["cave"],
            "importance": 0.6, "expires_at": null
        }))
        .expect("fact decodes");
        assert_eq!(fact.confidence, 1.0);
        assert_eq!(round_trip(&fact), fact);

        let moved: NpcMoved = serde_json::from_value(json!({
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "room_id": "tavern-1", "at": "2025-06-01T12:05:00Z"
        }))
        .expect("npc_moved decodes");
        assert_eq!(moved.schema_version, 1);

        for category in KnowledgeCategory::ALL {
            let json = serde_json::to_value(category).expect("serialises");
            assert_eq!(json, json!(category.as_str()));
        }
    }

    #[test]
    fn enrich_request_matches_the_design_example() {
        let request: EnrichRequest = serde_json::from_value(json!({
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
            "message": "Do you remember me?", "max_tokens": 1024,
            "npc": {"name": "Brom", "role": "blacksmith", "personality": "gruff but fair",
                    "speaking_style": "short sentences", "knowledge_domains": ["smithing"],
                    "secret_knowledge": [], "will_discuss": [], "wont_discuss": []},
            "template": null
        }))
        .expect("decodes");
        assert_eq!(request.schema_version, 1);
        assert_eq!(request.max_tokens, Some(1024));
        assert_eq!(request.npc.as_ref().map(|persona| persona.personality.as_str()), Some("gruff but fair"));
        assert_eq!(round_trip(&request), request);

        let minimal: EnrichRequest = serde_json::from_value(json!({
            "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
            "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32"
        }))
        .expect("minimal request decodes");
        assert_eq!(minimal.npc, None);
        assert_eq!(minimal.message, None);
    }

    #[test]
    fn enrich_reply_and_error_reply_serialise_as_designed() {
        let reply = EnrichReply {
            sections: vec![ContextSection {
                provider: "relationship".into(),
                content: "Brom trusts Aria.".into(),
                token_count: 5,
            }],
            placeholders: BTreeMap::from([("reputation".into(), "friend".into())]),
            system_prompt: None,
            token_count: 5,
            degraded: vec!["knowledge".into()],
            elapsed_us: 850,
        };
        let json = serde_json::to_value(&reply).expect("serialises");
        assert_eq!(json["sections"][0]["provider"], "relationship");
        assert_eq!(json["placeholders"]["reputation"], "friend");
        assert_eq!(round_trip(&reply), reply);

        let error = ErrorReply::new("not_found", "no such npc");
        assert_eq!(
            serde_json::to_value(&error).expect("serialises"),
            json!({"error": {"code": "not_found", "message": "no such npc"}})
        );
    }

    #[test]
    fn cache_invalidate_null_means_every_pair_on_that_side() {
        let invalidate: CacheInvalidate =
            serde_json::from_str(r#"{"npc_id":null,"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32"}"#)
                .expect("decodes");
        assert_eq!(invalidate.npc_id, None);
        assert!(invalidate.player_id.is_some());
        assert_eq!(
            serde_json::to_value(CacheInvalidate::default()).expect("serialises"),
            json!({"npc_id": null, "player_id": null})
        );

        let control: ControlChanged = serde_json::from_str(r#"{"switch":"degraded","value":true}"#).expect("decodes");
        assert_eq!(control.value, json!(true));
    }

    #[test]
    fn relationship_and_knowledge_events_round_trip() {
        let snapshot = |trust: f64, stage: &str| RelationshipSnapshot {
            trust,
            fear: 0.0,
            respect: 0.5,
            loyalty: 0.5,
            friendliness: 0.5,
            romantic_interest: 0.0,
            stage: stage.into(),
        };
        let changed = RelationshipChanged {
            schema_version: SCHEMA_VERSION,
            event_id: Uuid::from_u128(1),
            npc_id: Uuid::from_u128(2),
            player_id: Uuid::from_u128(3),
            conversation_id: Some(Uuid::from_u128(4)),
            version: 7,
            old: snapshot(0.5, "acquaintance"),
            new: snapshot(0.62, "friend"),
        };
        assert_eq!(round_trip(&changed), changed);

        let learned = KnowledgeLearned {
            schema_version: SCHEMA_VERSION,
            event_id: Uuid::from_u128(1),
            npc_id: Uuid::from_u128(2),
            fact: json!({"content": "The cave has treasure", "hop_count": 1}),
            from_npc_id: None,
        };
        assert_eq!(round_trip(&learned), learned);

        let privacy = PlayerPrivacy {
            schema_version: SCHEMA_VERSION,
            player_id: Uuid::from_u128(3),
            allow_memory: false,
            at: DateTime::from_timestamp(1_750_000_000, 0).expect("valid timestamp"),
        };
        assert_eq!(round_trip(&privacy), privacy);

        let consolidate = ConsolidateJob {
            schema_version: SCHEMA_VERSION,
            npc_id: Uuid::from_u128(2),
            player_id: Uuid::from_u128(3),
        };
        assert_eq!(round_trip(&consolidate), consolidate);
    }
}
