//! A memory candidate: what an extractor (LLM or rules) proposes for one conversation,
//! before the safety filter and storage.

use serde::{Deserialize, Serialize};

use crate::memory::{EmotionalValence, MemoryType};

/// Seed §Structured LLM Output: at most 3 memories per conversation.
pub const MAX_MEMORIES_PER_EXTRACTION: usize = 3;
/// Seed §Structured LLM Output: content is cut at 500 characters.
pub const MAX_CONTENT_CHARS: usize = 500;
/// DESIGN §9: every memory extracted from a conversation is capped at 0.7.
pub const MAX_EXTRACTED_IMPORTANCE: f64 = 0.7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractedMemory {
    pub memory_type: MemoryType,
    /// Human-readable, third person from the NPC's point of view ("Aria bought a sword
    /// for 50 gold"), ≤ `MAX_CONTENT_CHARS` characters, never empty.
    pub content: String,
    /// Lowercase tags; the relationship rules key on the seed's tag map
    /// (helpful, combat, heroic, trade, threat, betrayal, gift, insult) plus topic tags.
    pub tags: Vec<String>,
    /// In [0, 1].
    pub importance: f64,
    /// In [0, 1].
    pub confidence: f64,
    pub emotional_valence: EmotionalValence,
    /// In [0, 1].
    pub emotional_intensity: f64,
}
