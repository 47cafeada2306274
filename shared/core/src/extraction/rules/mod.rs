//! The rule-based extractor (README, "extract"): the offline default when
//! `NPCMEM_LLM_PROVIDER=rules`, and the fallback when the budget, the circuit breaker or
//! repeated invalid model output rule the LLM out.
//!
//! It keeps an event only where the conversation carries the evidence for it: a trade
//! needs a price and the player's acceptance or payment, a fight must have happened with
//! the player in it, a threat must promise the NPC harm, a secret must be confided. Each
//! event says who did what to whom and how severe it was, and carries the tags the
//! relationship rules key on (docs/relationships.md). What the player reveals about
//! themselves (name, origin, family, goals, likes) and what the NPC promised or revealed
//! are kept as semantic memories in the speaker's own words. Small talk yields nothing.
//!
//! The transcript it reads is already PII-redacted by ingest. Output is deterministic.

mod events;
mod facts;
pub mod learned;
mod lexicon;
mod text;

use std::sync::OnceLock;

pub use crate::extraction::candidate::Party;
use crate::extraction::candidate::{
    ExtractedMemory, MAX_CONTENT_CHARS, MAX_EXTRACTED_IMPORTANCE, MAX_MEMORIES_PER_EXTRACTION,
};
use crate::memory::{EmotionalValence, MemoryType, round3};
use crate::summary::truncate_chars;
use crate::wire::{ConversationEnded, Speaker};

use text::Sentence;

/// Pattern matching is less certain than a model reading the whole scene.
const RULES_CONFIDENCE: f64 = 0.6;
/// Facts a player states outright are surer than events read off the scene.
const FACT_CONFIDENCE: f64 = 0.7;
/// The statement's placeholders for the player and the NPC.
pub(crate) const P: &str = crate::perspective::PLAYER;
pub(crate) const N: &str = crate::perspective::NPC;
/// Quotes inside a memory stay short.
const QUOTE_CHARS: usize = 160;
/// At most this many facts besides the events: an introduction can give name, origin and
/// family at once.
pub const MAX_FACTS_PER_EXTRACTION: usize = 3;

/// What a memory is about: an event between the two, or a fact one of them revealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Trade,
    Gift,
    Help,
    Combat,
    Rescue,
    Threat,
    Insult,
    Theft,
    Betrayal,
    Promise,
    Secret,
    PlayerName,
    PlayerOrigin,
    PlayerFamily,
    PlayerGoal,
    PlayerPreference,
    NpcPromise,
    NpcRevealed,
}

impl Kind {
    pub const EVENTS: [Kind; 11] = [
        Kind::Trade,
        Kind::Gift,
        Kind::Help,
        Kind::Combat,
        Kind::Rescue,
        Kind::Threat,
        Kind::Insult,
        Kind::Theft,
        Kind::Betrayal,
        Kind::Promise,
        Kind::Secret,
    ];
    pub const FACTS: [Kind; 7] = [
        Kind::PlayerName,
        Kind::PlayerOrigin,
        Kind::PlayerFamily,
        Kind::PlayerGoal,
        Kind::PlayerPreference,
        Kind::NpcPromise,
        Kind::NpcRevealed,
    ];

    /// The kind's name, also the first tag of every memory of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Trade => "trade",
            Kind::Gift => "gift",
            Kind::Help => "help",
            Kind::Combat => "combat",
            Kind::Rescue => "rescue",
            Kind::Threat => "threat",
            Kind::Insult => "insult",
            Kind::Theft => "theft",
            Kind::Betrayal => "betrayal",
            Kind::Promise => "promise",
            Kind::Secret => "secret",
            Kind::PlayerName => "player_name",
            Kind::PlayerOrigin => "player_origin",
            Kind::PlayerFamily => "player_family",
            Kind::PlayerGoal => "player_goal",
            Kind::PlayerPreference => "player_preference",
            Kind::NpcPromise => "npc_promise",
            Kind::NpcRevealed => "npc_revealed",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::EVENTS.into_iter().chain(Kind::FACTS).find(|kind| kind.as_str() == text)
    }

    pub fn is_event(self) -> bool {
        Kind::EVENTS.contains(&self)
    }

    /// The tags after the kind's own that the relationship rules key on (seed
    /// §RelationshipEvaluator: helpful, combat, heroic, trade, threat, betrayal, gift,
    /// insult). A theft is a betrayal of trust; a rescue is heroic.
    fn relationship_tags(self) -> &'static [&'static str] {
        match self {
            Kind::Help => &["helpful"],
            Kind::Rescue => &["heroic"],
            Kind::Theft => &["betrayal"],
            kind if !kind.is_event() => &["fact"],
            _ => &[],
        }
    }

    /// Base importance, valence and intensity before severity.
    fn weight(self) -> (f64, EmotionalValence, f64) {
        use EmotionalValence::*;
        match self {
            Kind::Trade => (0.4, Neutral, 0.15),
            Kind::Gift => (0.5, Positive, 0.5),
            Kind::Help => (0.55, Positive, 0.5),
            Kind::Combat => (0.6, Positive, 0.6),
            Kind::Rescue => (0.7, Positive, 0.9),
            Kind::Threat => (0.6, Negative, 0.8),
            Kind::Insult => (0.45, Negative, 0.5),
            Kind::Theft => (0.6, Negative, 0.7),
            Kind::Betrayal => (0.65, Negative, 0.8),
            Kind::Promise => (0.45, Positive, 0.3),
            Kind::Secret => (0.6, Neutral, 0.5),
            // Facts: what was said, not an event to feel about.
            _ => (0.35, Neutral, 0.1),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Minor,
    Moderate,
    Severe,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Minor, Severity::Moderate, Severity::Severe];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Minor => "minor",
            Severity::Moderate => "moderate",
            Severity::Severe => "severe",
        }
    }

    fn importance_step(self) -> f64 {
        match self {
            Severity::Minor => -0.1,
            Severity::Moderate => 0.0,
            Severity::Severe => 0.1,
        }
    }

    fn intensity_factor(self) -> f64 {
        match self {
            Severity::Minor => 0.6,
            Severity::Moderate => 0.85,
            Severity::Severe => 1.0,
        }
    }
}

/// One recognised memory before ranking: what, who to whom, how bad, in what words.
#[derive(Debug, Clone)]
pub struct Finding {
    pub kind: Kind,
    pub actor: Party,
    pub target: Option<Party>,
    pub severity: Severity,
    /// The sentence that carries it, as said.
    pub evidence: String,
    /// The memory told by anyone, `{player}` and `{npc}` for the two parties
    /// ("{player} threatened {npc}: …", see `npcmem_core::perspective`).
    pub statement: String,
    /// The statement as the NPC remembers it ("Aria threatened you: …"); filled by
    /// [`RulesExtractor::findings`].
    pub content: String,
    /// Topic tags after the kind's own (the traded item, the enemy).
    pub topics: Vec<String>,
    /// A fight against the NPC is not a shared one.
    pub valence: Option<EmotionalValence>,
}

/// A conversation as the detectors see it.
pub(crate) struct Scene<'a> {
    pub sentences: Vec<Sentence<'a>>,
    /// The player's name as the memory says it ("Aria", or "The player").
    pub player: String,
    /// The player's first name as registered, for spotting an introduction.
    pub player_first_name: Option<String>,
    /// Every sentence's plain form, joined: for cues anywhere in the conversation.
    pub plain: String,
}

impl<'a> Scene<'a> {
    pub fn said_by(&self, speaker: Speaker) -> impl Iterator<Item = &Sentence<'a>> {
        self.sentences.iter().filter(move |s| s.by(speaker) && !s.reported)
    }

    /// Sentences after the one at `index`.
    pub fn after(&self, index: usize) -> impl Iterator<Item = &Sentence<'a>> {
        self.sentences.iter().skip(index + 1)
    }

    /// The next message of the other speaker after the sentence at `index`, all of it.
    pub fn reply_to(&self, index: usize) -> impl Iterator<Item = &Sentence<'a>> {
        let sentence = &self.sentences[index];
        let reply = self.after(index).find(|s| s.speaker != sentence.speaker).map(|s| s.message);
        self.sentences.iter().filter(move |s| Some(s.message) == reply)
    }
}

pub struct RulesExtractor {
    events: events::Patterns,
    facts: facts::Patterns,
    /// The learned reader; the shipped one unless a tool is scoring another.
    reader: Option<learned::Reader>,
}

impl Default for RulesExtractor {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) fn compile(pattern: &str) -> regex::Regex {
    regex::Regex::new(pattern).expect("the rules extractor's patterns are valid")
}

impl RulesExtractor {
    pub fn new() -> Self {
        Self { events: events::Patterns::new(), facts: facts::Patterns::new(), reader: None }
    }

    /// The patterns with `reader` in place of the shipped reader, or with none at all:
    /// for the trainer, to score a model on conversations it was not trained on.
    pub fn with_reader(reader: Option<learned::Reader>) -> Self {
        let reader = Some(reader.unwrap_or_else(learned::Reader::none));
        Self { reader, ..Self::new() }
    }

    pub fn shared() -> &'static RulesExtractor {
        static SHARED: OnceLock<RulesExtractor> = OnceLock::new();
        SHARED.get_or_init(RulesExtractor::new)
    }

    /// Every event and fact the conversation carries evidence of, events first, each
    /// kind at most once.
    pub fn findings(&self, conversation: &ConversationEnded) -> Vec<Finding> {
        let scene = scene(conversation);
        let mut findings = self.events.detect(&scene);
        let facts = self.facts.detect(&scene);
        // What the patterns missed, the learned reader may find told in other words.
        let reader = self.reader.as_ref().unwrap_or_else(|| learned::Reader::shipped());
        for reading in reader.read(&scene) {
            // A good turn the patterns already read as help, a gift or a rescue is not read
            // again as another of them ("Let me carry those sacks for you" is not a gift).
            const GOOD_TURNS: [Kind; 3] = [Kind::Help, Kind::Gift, Kind::Rescue];
            let told = |finding: &Finding| {
                finding.kind == reading.kind
                    || (GOOD_TURNS.contains(&finding.kind) && GOOD_TURNS.contains(&reading.kind))
            };
            if findings.iter().chain(&facts).any(told) {
                continue;
            }
            // Facts stay with the patterns: on unseen conversations the reader's facts were
            // wrong as often as right.
            if reading.kind.is_event() {
                findings.extend(self.events.event_read(&scene, reading.kind, reading.sentence));
            }
        }
        repayments_are_not_trades(&scene, &mut findings);
        findings.extend(facts);
        for finding in &mut findings {
            finding.content = as_the_npc_remembers(&finding.statement, &scene.player);
        }
        findings
    }

    /// At most [`MAX_MEMORIES_PER_EXTRACTION`] events, most important first, then at most
    /// [`MAX_FACTS_PER_EXTRACTION`] facts.
    pub fn extract(&self, conversation: &ConversationEnded) -> Vec<ExtractedMemory> {
        let (mut events, mut facts): (Vec<ExtractedMemory>, Vec<ExtractedMemory>) = self
            .findings(conversation)
            .into_iter()
            .map(finish)
            .partition(|memory| memory.memory_type == MemoryType::Episodic);
        // Most important first; detection order breaks ties deterministically.
        events.sort_by(|a, b| b.importance.total_cmp(&a.importance));
        events.truncate(MAX_MEMORIES_PER_EXTRACTION);
        facts.truncate(MAX_FACTS_PER_EXTRACTION);
        events.extend(facts);
        events
    }
}

/// The memory the extractor keeps of `kind` at `severity`, the player acting on the NPC,
/// with `topics` after its tags: for tests and tools that need one shaped exactly so.
pub fn shaped(kind: Kind, severity: Severity, topics: &[&str]) -> ExtractedMemory {
    let statement = format!("{P} and {N}");
    finish(Finding {
        kind,
        actor: Party::Player,
        target: Some(Party::Npc),
        severity,
        evidence: String::new(),
        content: as_the_npc_remembers(&statement, "Aria"),
        statement,
        topics: topics.iter().map(|topic| topic.to_string()).collect(),
        valence: None,
    })
}

fn finish(finding: Finding) -> ExtractedMemory {
    let (base, valence, intensity) = finding.kind.weight();
    let mut tags: Vec<String> = vec![finding.kind.as_str().to_string()];
    for tag in finding.kind.relationship_tags().iter().map(|t| t.to_string()).chain(finding.topics) {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    let memory_type = if finding.kind.is_event() { MemoryType::Episodic } else { MemoryType::Semantic };
    let statement = truncate_chars(&finding.statement, MAX_CONTENT_CHARS).into_owned();
    let confidence = if finding.kind.is_event() { RULES_CONFIDENCE } else { FACT_CONFIDENCE };
    let importance = (base + finding.severity.importance_step()).clamp(0.1, MAX_EXTRACTED_IMPORTANCE);
    ExtractedMemory {
        memory_type,
        content: truncate_chars(&finding.content, MAX_CONTENT_CHARS).into_owned(),
        tags,
        importance: round3(importance),
        confidence,
        emotional_valence: finding.valence.unwrap_or(valence),
        emotional_intensity: round3(intensity * finding.severity.intensity_factor()),
        actor: Some(finding.actor),
        target: finding.target,
        statement: Some(statement),
    }
}

/// Money handed back after a theft comes out makes good what was taken; it buys nothing.
/// So a trade told by the player at or after the theft's sentence is not kept.
fn repayments_are_not_trades(scene: &Scene<'_>, findings: &mut Vec<Finding>) {
    let at = |evidence: &str| scene.sentences.iter().position(|s| s.text == evidence);
    let Some(theft) = findings.iter().find(|f| f.kind == Kind::Theft).and_then(|f| at(&f.evidence)) else {
        return;
    };
    findings.retain(|finding| {
        finding.kind != Kind::Trade
            || !at(&finding.evidence).is_some_and(|i| i >= theft && scene.sentences[i].by(Speaker::Player))
    });
}

/// The conversation cut into sentences, as every reader sees it.
pub(crate) fn scene(conversation: &ConversationEnded) -> Scene<'_> {
    let player = display_name(&conversation.player.name, "The player");
    let player_first_name = conversation
        .player
        .name
        .split_whitespace()
        .next()
        .filter(|name| name.chars().next().is_some_and(char::is_uppercase))
        .map(str::to_string);
    let sentences = text::sentences(conversation.messages.iter().map(|m| (m.speaker, m.text.as_str())));
    let plain = sentences.iter().map(|s| s.plain.as_str()).collect::<Vec<_>>().join(" ");
    Scene { sentences, player, player_first_name, plain }
}

fn display_name(name: &str, fallback: &str) -> String {
    let trimmed = name.trim();
    if trimmed.is_empty() { fallback.to_string() } else { trimmed.to_string() }
}

/// Words that deny what follows them.
pub(crate) const NEGATIONS: &[&str] = &[
    "not", "never", "no", "won't", "wouldn't", "don't", "didn't", "cannot", "can't", "shan't", "nobody", "without",
    "isn't", "wasn't", "couldn't", "nor",
];

/// True when a negation word stands among the three words before byte `position`.
pub(crate) fn negated(plain: &str, position: usize) -> bool {
    // "You will not object to turning out your sleeve": a negated objection asks for it.
    const LITOTES: &[&str] = &["object", "mind", "hesitate", "refuse"];
    let before = plain.get(..position).unwrap_or("");
    let words: Vec<&str> =
        before.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).rev().take(3).collect();
    match words.iter().position(|w| NEGATIONS.contains(w)) {
        Some(negation) => !words[..negation].iter().any(|w| LITOTES.contains(w)),
        None => false,
    }
}

/// A sentence quoted inside a memory; braces become parentheses, so nothing said can
/// pass for a statement's placeholder.
pub(crate) fn quote(text: &str) -> String {
    let text = truncate_chars(text.trim(), QUOTE_CHARS).replace('{', "(").replace('}', ")");
    format!("\"{text}\"")
}

/// The statement as the NPC that lived it remembers it: `{npc}` is "you".
fn as_the_npc_remembers(statement: &str, player: &str) -> String {
    let npc = uuid::Uuid::nil();
    crate::perspective::render(statement, player, Some((npc, "")), npc, None)
}

#[cfg(test)]
mod tests;
