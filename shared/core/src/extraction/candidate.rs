//! A memory candidate: what an extractor (LLM or rules) proposes for one conversation,
//! before the safety filter and storage.

use serde::{Deserialize, Serialize};

use crate::memory::{EmotionalValence, MemoryType};

/// The original design (Structured LLM Output): at most 3 memories per conversation.
pub const MAX_MEMORIES_PER_EXTRACTION: usize = 3;
/// The original design (Structured LLM Output): content is cut at 500 characters.
pub const MAX_CONTENT_CHARS: usize = 500;
/// every memory extracted from a conversation is capped at 0.7.
pub const MAX_EXTRACTED_IMPORTANCE: f64 = 0.7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedMemory {
    pub memory_type: MemoryType,
    /// Human-readable, third person from the NPC's point of view ("Aria bought a sword
    /// for 50 gold"), ≤ `MAX_CONTENT_CHARS` characters, never empty.
    pub content: String,
    /// Lowercase tags; the relationship rules key on the original design's tag map
    /// (helpful, combat, heroic, trade, threat, betrayal, gift, insult) plus topic tags.
    pub tags: Vec<String>,
    /// In [0, 1].
    pub importance: f64,
    /// In [0, 1].
    pub confidence: f64,
    pub emotional_valence: EmotionalValence,
    /// In [0, 1].
    pub emotional_intensity: f64,
    /// Who did it and to whom, when the extractor knows.
    #[serde(default)]
    pub actor: Option<Party>,
    #[serde(default)]
    pub target: Option<Party>,
    /// The memory with `{player}` and `{npc}` for the two parties
    /// (`npcmem_core::perspective`); `content` is it rendered for the NPC.
    #[serde(default)]
    pub statement: Option<String>,
}

/// A party to an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Party {
    Player,
    Npc,
    /// Someone else: the bandits, the player's brother.
    Other,
}

impl std::str::FromStr for Party {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        [Party::Player, Party::Npc, Party::Other].into_iter().find(|party| party.as_str() == text).ok_or(())
    }
}

impl Party {
    pub fn as_str(self) -> &'static str {
        match self {
            Party::Player => "player",
            Party::Npc => "npc",
            Party::Other => "other",
        }
    }
}
