//! Realistic synthetic conversations for benchmarks: 8–20 messages, ~1.5 KB, a mix of
//! trade, quests, threats and small talk, deterministic for a given seed.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

const PLAYER_LINES: &[&str] = &[
    "Good morning! I need a sturdy longsword.",
    "How much for that iron shield by the door?",
    "Bandits raid the mill road at night. Heard anything?",
    "I brought the silverleaf you asked for.",
    "That is robbery. Thirty gold, not a copper more.",
    "Could you repair my armour before tomorrow?",
    "The captain says you owe him a favour.",
    "People say the old mine is haunted. True?",
    "Thank you, the potion saved my life in the crypt.",
    "Tell anyone I was here and you will regret it.",
];

const NPC_LINES: &[&str] = &[
    "Mountain iron, fifty gold and it is yours.",
    "Forty gold. I hammered every rivet myself.",
    "They took a cart of my charcoal last month.",
    "Good, I needed that. Ten silver for your trouble.",
    "Forty-five, because you look honest.",
    "Leave it on the bench, come back at sunrise.",
    "Tell him to come himself next time.",
    "Strange lights up there at night, they say.",
    "Glad it worked. The dead sleep badly down there.",
    "No need for threats. I keep my mouth shut.",
];

/// Deterministic pseudo-random numbers (xorshift) so runs are comparable.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

pub struct SampleConversation {
    pub conversation_id: Uuid,
    pub payload: Vec<u8>,
}

/// `count` conversations over `pairs` NPC–player pairs.
pub fn conversations(count: usize, pairs: usize, seed: u64) -> Vec<SampleConversation> {
    let mut random = Xorshift(seed.max(1));
    let pair_ids: Vec<(Uuid, Uuid)> = (0..pairs.max(1)).map(|_| (Uuid::new_v4(), Uuid::new_v4())).collect();
    (0..count)
        .map(|_| {
            let (npc_id, player_id) = pair_ids[random.below(pair_ids.len())];
            let conversation_id = Uuid::new_v4();
            let message_count = 8 + random.below(13);
            let messages: Vec<Value> = (0..message_count)
                .map(|i| {
                    if i % 2 == 0 {
                        json!({"speaker": "player", "text": PLAYER_LINES[random.below(PLAYER_LINES.len())]})
                    } else {
                        json!({"speaker": "npc", "text": NPC_LINES[random.below(NPC_LINES.len())]})
                    }
                })
                .collect();
            let ended_at = Utc::now();
            let document = json!({
                "schema_version": 1,
                "conversation_id": conversation_id,
                "npc_id": npc_id,
                "player_id": player_id,
                "npc": {"name": "Brom", "role": "blacksmith", "factions": ["smiths_guild"]},
                "player": {"name": "Aria", "factions": ["adventurers"]},
                "location": "Market Square",
                "started_at": (ended_at - Duration::minutes(4)).to_rfc3339(),
                "ended_at": ended_at.to_rfc3339(),
                "messages": messages,
            });
            SampleConversation {
                conversation_id,
                payload: serde_json::to_vec(&document).expect("sample documents serialise"),
            }
        })
        .collect()
}

const EVENT_TAGS: &[&[&str]] = &[
    &["trade"],
    &["helpful"],
    &["helpful", "heroic"],
    &["threat"],
    &["gift"],
    &["insult"],
    &["combat"],
    &["betrayal"],
    &["quest", "helpful"],
];
const VALENCES: &[&str] = &["positive", "negative", "neutral"];

/// `count` `event.memory.stored` messages as extract publishes them, over `pairs` pairs:
/// 0–3 memories each with tags the relationship rules use.
pub fn memory_events(count: usize, pairs: usize, seed: u64) -> Vec<SampleConversation> {
    let mut random = Xorshift(seed.max(1));
    let pair_ids: Vec<(Uuid, Uuid)> = (0..pairs.max(1)).map(|_| (Uuid::new_v4(), Uuid::new_v4())).collect();
    (0..count)
        .map(|_| {
            let (npc_id, player_id) = pair_ids[random.below(pair_ids.len())];
            let conversation_id = Uuid::new_v4();
            let memories: Vec<Value> = (0..random.below(4))
                .map(|_| {
                    json!({
                        "id": Uuid::new_v4(),
                        "memory_type": "episodic",
                        "content": "The player traded with me in the market.",
                        "tags": EVENT_TAGS[random.below(EVENT_TAGS.len())],
                        "importance": 0.3 + random.below(5) as f64 / 10.0,
                        "confidence": 0.9,
                        "emotional_valence": VALENCES[random.below(VALENCES.len())],
                        "emotional_intensity": random.below(11) as f64 / 10.0,
                        "safety_flag": "clean",
                    })
                })
                .collect();
            let document = json!({
                "schema_version": 1,
                "event_id": Uuid::new_v4(),
                "conversation_id": conversation_id,
                "npc_id": npc_id,
                "player_id": player_id,
                "npc_factions": ["merchants_guild"],
                "player_factions": ["adventurers"],
                "extractor": "rules",
                "ended_at": Utc::now().to_rfc3339(),
                "memories": memories,
            });
            SampleConversation {
                conversation_id,
                payload: serde_json::to_vec(&document).expect("sample documents serialise"),
            }
        })
        .collect()
}
