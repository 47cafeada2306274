//! Payload builders for tests.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

pub struct Pair {
    pub npc_id: Uuid,
    pub player_id: Uuid,
}

impl Pair {
    pub fn new() -> Self {
        Self { npc_id: Uuid::new_v4(), player_id: Uuid::new_v4() }
    }
}

impl Default for Pair {
    fn default() -> Self {
        Self::new()
    }
}

/// A valid `conversation.ended` document with the given lines (player, npc alternating).
/// A conversation of `pair` (with a new id) that started `days_ago` days ago and lasted
/// five minutes.
pub fn conversation_at(pair: &Pair, days_ago: i64, lines: &[&str]) -> (Uuid, Value) {
    let id = Uuid::new_v4();
    let mut document = conversation(id, pair, lines);
    let started_at = Utc::now() - Duration::days(days_ago);
    document["started_at"] = json!(started_at.to_rfc3339());
    document["ended_at"] = json!((started_at + Duration::minutes(5)).to_rfc3339());
    (id, document)
}

pub fn conversation(conversation_id: Uuid, pair: &Pair, lines: &[&str]) -> Value {
    let ended_at = Utc::now();
    let started_at = ended_at - Duration::minutes(3);
    let messages: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"speaker": if i % 2 == 0 { "player" } else { "npc" }, "text": text}))
        .collect();
    json!({
        "schema_version": 1,
        "conversation_id": conversation_id,
        "npc_id": pair.npc_id,
        "player_id": pair.player_id,
        "npc": {"name": "Brom", "role": "blacksmith", "factions": ["smiths_guild"]},
        "player": {"name": "Aria", "factions": ["thieves_guild"]},
        "location": "Market Square",
        "started_at": started_at.to_rfc3339(),
        "ended_at": ended_at.to_rfc3339(),
        "messages": messages,
    })
}

pub fn trade_conversation(conversation_id: Uuid, pair: &Pair) -> Value {
    conversation(
        conversation_id,
        pair,
        &["I need a sword.", "Fifty gold for a fine blade.", "Deal, here is the gold.", "Pleasure doing business."],
    )
}

pub fn bytes(document: &Value) -> Vec<u8> {
    serde_json::to_vec(document).expect("json documents serialise")
}

/// One memory of an `event.memory.stored`: tags, importance, valence, intensity.
#[derive(Debug, Clone, Copy)]
pub struct EventMemory<'a> {
    pub tags: &'a [&'a str],
    pub importance: f64,
    pub valence: &'a str,
    pub intensity: f64,
}

/// An `event.memory.stored` as extract publishes it, for the pair's conversation.
pub fn memory_stored(
    conversation_id: Uuid,
    pair: &Pair,
    memories: &[EventMemory<'_>],
    ended_at: chrono::DateTime<Utc>,
    npc_factions: &[&str],
    player_factions: &[&str],
) -> Value {
    let memories: Vec<Value> = memories
        .iter()
        .map(|m| {
            json!({"id": Uuid::new_v4(), "memory_type": "episodic", "content": format!("{:?}", m.tags),
                   "tags": m.tags, "importance": m.importance, "confidence": 0.9,
                   "emotional_valence": m.valence, "emotional_intensity": m.intensity, "safety_flag": "clean"})
        })
        .collect();
    json!({
        "schema_version": 1,
        "event_id": Uuid::new_v4(),
        "conversation_id": conversation_id,
        "npc_id": pair.npc_id,
        "player_id": pair.player_id,
        "npc_factions": npc_factions,
        "player_factions": player_factions,
        "extractor": "rules",
        "ended_at": ended_at.to_rfc3339(),
        "memories": memories,
    })
}
