//! Realistic synthetic conversations for benchmarks: 8–20 messages, ~1.5 KB, a mix of
//! trade, quests, threats and small talk, deterministic for a given seed.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

const PLAYER_LINES: &[&str] = &[
    "Good morning! I am looking for a sturdy longsword, something that will not snap on the first orc.",
    "How much would you want for that iron shield hanging by the door? It looks well made.",
    "I heard bandits have been raiding the mill road at night. Do you know anything about that?",
    "I brought the herbs you asked for last week, three bundles of silverleaf from the marsh.",
    "That price is robbery. I will give you thirty gold and not a copper more.",
    "Could you repair my armour before tomorrow? The straps on the left side are torn.",
    "The captain of the guard sent me. He says you owe him a favour for the winter.",
    "Do you ever hear stories about the old mine in the hills? People say it is haunted.",
    "Thank you for the help yesterday, the potion saved my life in the crypt.",
    "If you tell anyone I was here, you will regret it. Understood?",
];

const NPC_LINES: &[&str] = &[
    "Aye, I have a few blades. This one was forged from mountain iron, fifty gold and it is yours.",
    "The shield? Forty gold. I hammered every rivet myself, it will hold against any axe.",
    "Bandits, you say. I lost a cart of charcoal to them last month. Nobody does anything about it.",
    "Silverleaf! Good, I needed that for the quenching oil. Here, take these ten silver for your trouble.",
    "Thirty? You must be joking. Forty-five, and that is because you look honest.",
    "Leave it on the bench. Come back at sunrise and it will be good as new, for a small fee.",
    "The captain, hmm. Tell him I have not forgotten, but he should come himself next time.",
    "The old mine. My grandfather worked there before the collapse. Strange lights at night, they say.",
    "I am glad it worked. Be careful down there, the dead do not sleep well in that crypt.",
    "No need for threats. I keep my mouth shut, that is how a smith stays alive in this town.",
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
