//! Prompt context (seed §AI Integration, §Memory Context Formatting, §Token Management;
//! DESIGN §9 relevance and reputation): ranking memories for the current message,
//! formatting them with ages, the relationship summary and `{reputation}`, the budget
//! split between providers, and the default system prompt.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::memory::{MemoryType, SalienceInputs, compute_salience};
use crate::relationship::{Dimension, Relationship, Stage};
use crate::wire::Persona;

/// A memory as the enricher holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextMemory {
    pub id: uuid::Uuid,
    pub memory_type: MemoryType,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub locked: bool,
    pub emotional_intensity: f64,
    pub access_count: i64,
    pub last_accessed: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl ContextMemory {
    pub fn salience(&self, now: DateTime<Utc>) -> f64 {
        compute_salience(
            &SalienceInputs {
                importance: self.importance,
                last_accessed: self.last_accessed,
                access_count: self.access_count,
                locked: self.locked,
                emotional_intensity: self.emotional_intensity,
            },
            now,
        )
    }
}

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "is", "are", "was", "were",
    "be", "been", "do", "does", "did", "you", "your", "i", "me", "my", "we", "it", "that", "this", "what", "about",
    "have", "has", "had", "can", "could", "will", "would", "remember", "player", "they", "them", "their", "he", "she",
    "his", "her", "from", "so", "if", "not", "no", "yes", "how", "when", "who",
];

fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.len() > 1)
        .map(str::to_lowercase)
        .filter(|word| !STOPWORDS.contains(&word.as_str()))
}

/// BM25 relevance (k1 1.2, b 0.75) of each memory's content and tags to `message`,
/// normalised to [0, 1] by the best-matching memory of the set (which gets 1).
pub fn relevance(message: &str, memories: &[ContextMemory]) -> Vec<f64> {
    RelevanceIndex::build(memories).score(message)
}

/// An inverted index over a pair's memories, built once when the pair is loaded, so a
/// request only walks the postings of its own terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelevanceIndex {
    postings: HashMap<String, Vec<(u32, f64)>>,
    lengths: Vec<f64>,
    average: f64,
}

impl RelevanceIndex {
    pub fn build(memories: &[ContextMemory]) -> Self {
        let mut postings: HashMap<String, Vec<(u32, f64)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(memories.len());
        for (index, memory) in memories.iter().enumerate() {
            let mut counts: HashMap<String, f64> = HashMap::new();
            for term in terms(&memory.content).chain(memory.tags.iter().flat_map(|tag| terms(tag).collect::<Vec<_>>()))
            {
                *counts.entry(term).or_insert(0.0) += 1.0;
            }
            lengths.push(counts.values().sum::<f64>().max(1.0));
            for (term, count) in counts {
                postings.entry(term).or_default().push((index as u32, count));
            }
        }
        let average = if lengths.is_empty() { 1.0 } else { lengths.iter().sum::<f64>() / lengths.len() as f64 };
        Self { postings, lengths, average }
    }

    /// One relevance per indexed memory, in index order.
    pub fn score(&self, message: &str) -> Vec<f64> {
        let mut scores = vec![0.0; self.lengths.len()];
        let query: HashSet<String> = terms(message).collect();
        let n = self.lengths.len() as f64;
        let (k1, b) = (1.2, 0.75);
        for term in &query {
            let Some(postings) = self.postings.get(term) else { continue };
            let containing = postings.len() as f64;
            let idf = ((n - containing + 0.5) / (containing + 0.5) + 1.0).ln();
            for &(index, tf) in postings {
                let length = self.lengths[index as usize];
                scores[index as usize] += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / self.average));
            }
        }
        let best = scores.iter().copied().fold(0.0_f64, f64::max);
        if best > 0.0 {
            for score in &mut scores {
                *score = (*score / best).clamp(0.0, 1.0);
            }
        }
        scores
    }
}

/// DESIGN §9 ranking: locked memories first, then salience × (0.5 + 0.5 · relevance),
/// best first (ties: newer first).
pub fn rank<'a>(memories: &'a [ContextMemory], message: Option<&str>, now: DateTime<Utc>) -> Vec<&'a ContextMemory> {
    rank_indexed(memories, &RelevanceIndex::build(memories), message, now)
}

/// [`rank`] with the pair's prebuilt index.
pub fn rank_indexed<'a>(
    memories: &'a [ContextMemory],
    index: &RelevanceIndex,
    message: Option<&str>,
    now: DateTime<Utc>,
) -> Vec<&'a ContextMemory> {
    let relevance = match message {
        Some(message) if !memories.is_empty() => index.score(message),
        _ => vec![0.0; memories.len()],
    };
    let mut scored: Vec<(bool, f64, &ContextMemory)> = memories
        .iter()
        .zip(relevance)
        .map(|(memory, relevance)| (memory.locked, memory.salience(now) * (0.5 + 0.5 * relevance), memory))
        .collect();
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(b.2.created_at.cmp(&a.2.created_at)).then(a.2.id.cmp(&b.2.id))
    });
    scored.into_iter().map(|(_, _, memory)| memory).collect()
}

/// "just now", "5 minutes ago", "2 hours ago", "yesterday", "3 days ago", "2 weeks ago",
/// "4 months ago", "2 years ago".
pub fn format_age(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - at).num_seconds().max(0);
    let plural = |count: i64, unit: &str| format!("{count} {unit}{} ago", if count == 1 { "" } else { "s" });
    match seconds {
        0..60 => "just now".to_owned(),
        60..3_600 => plural(seconds / 60, "minute"),
        3_600..86_400 => plural(seconds / 3_600, "hour"),
        86_400..172_800 => "yesterday".to_owned(),
        172_800..1_209_600 => plural(seconds / 86_400, "day"),
        1_209_600..5_184_000 => plural(seconds / 604_800, "week"),
        5_184_000..63_072_000 => plural(seconds / 2_592_000, "month"),
        _ => plural(seconds / 31_536_000, "year"),
    }
}

pub const MEMORY_HEADER: &str = "Your memories of this player:";
pub const NO_MEMORIES: &str = "You have no specific memories of this player.";

/// One line of the seed's memory section: icon, content, age and 1–4 stars.
pub fn memory_line(memory: &ContextMemory, now: DateTime<Utc>) -> String {
    let icon = match memory.memory_type {
        MemoryType::Episodic => "📝",
        MemoryType::Semantic => "💡",
        MemoryType::Procedural => "🔄",
    };
    let stars = "⭐".repeat((memory.importance.clamp(0.0, 1.0) * 3.0 + 1.0) as usize);
    format!("{icon} {} ({}, {stars})", memory.content, format_age(memory.created_at, now))
}

/// Seed `_format_relationship`.
pub fn relationship_summary(relationship: &Relationship) -> String {
    let stage = title_case(&relationship.stage.as_str().replace('_', " "));
    let attitude = if relationship.disposition > 0.5 {
        "You regard them positively"
    } else if relationship.disposition < -0.5 {
        "You regard them negatively"
    } else {
        "You have neutral feelings toward them"
    };
    let details = descriptors(relationship);
    let detail_text = if details.is_empty() { String::new() } else { format!(" ({})", details.join(", ")) };
    format!("Relationship: {stage}. {attitude}.{detail_text}")
}

fn descriptors(relationship: &Relationship) -> Vec<&'static str> {
    let mut details = Vec::new();
    let trust = relationship.get(Dimension::Trust);
    if trust > 0.7 {
        details.push("trustworthy");
    } else if trust < 0.3 {
        details.push("untrustworthy");
    }
    if relationship.get(Dimension::Fear) > 0.5 {
        details.push("intimidating");
    }
    if relationship.get(Dimension::Respect) > 0.7 {
        details.push("respectable");
    }
    details
}

fn title_case(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|first| first.to_uppercase().chain(chars).collect::<String>()).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub const STRANGER: &str = "stranger (no prior interaction)";

/// `{reputation}` (DESIGN §9): the stage plus descriptors; for a stranger, the player's
/// standing with the NPC's factions and what the NPC heard about them, if anything.
pub fn reputation(relationship: Option<&Relationship>, faction_standing: &[(String, f64)], heard: &[String]) -> String {
    if let Some(relationship) = relationship.filter(|r| r.stage != Stage::Stranger) {
        let stage = relationship.stage.as_str().replace('_', " ");
        let details = descriptors(relationship);
        return if details.is_empty() { stage } else { format!("{stage} ({})", details.join(", ")) };
    }
    let mut parts = Vec::new();
    for (faction, standing) in faction_standing {
        let name = faction.replace('_', " ");
        let opinion = if *standing >= 0.25 {
            "thinks well of them"
        } else if *standing <= -0.25 {
            "thinks badly of them"
        } else {
            continue;
        };
        parts.push(format!("the {name} {opinion}"));
    }
    for fact in heard.iter().take(2) {
        parts.push(format!("heard: {fact}"));
    }
    if parts.is_empty() { STRANGER.to_owned() } else { format!("stranger; {}", parts.join("; ")) }
}

/// Seed `mood_description`: "quite anxious".
pub fn mood_description(mood: &str, intensity: f64) -> String {
    let word = match intensity {
        i if i < 0.3 => "slightly",
        i if i < 0.6 => "moderately",
        i if i < 0.9 => "quite",
        _ => "extremely",
    };
    format!("{word} {mood}")
}

/// Seed §Token Management shares (of `max_tokens`) per provider; overridable.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetManager {
    shares: BTreeMap<String, f64>,
}

impl Default for BudgetManager {
    /// memory 25 %, relationship 10 %, knowledge 10 % (the seed's); working memory 10 %,
    /// mood 5 % and recalled moments 25 % from the seed's unallocated pool. What a section
    /// leaves unused flows to the others ([`BudgetManager::distribute`]).
    fn default() -> Self {
        let shares = [
            ("memory", 0.25),
            ("relationship", 0.10),
            ("knowledge", 0.10),
            ("working_memory", 0.10),
            ("mood", 0.05),
            ("recall", 0.25),
        ]
        .into_iter()
        .map(|(name, share)| (name.to_owned(), share))
        .collect();
        Self { shares }
    }
}

impl BudgetManager {
    /// `memory=0.3,knowledge=0.05`: overrides of the default shares. Shares must lie in
    /// [0, 1] and sum to at most 1.
    pub fn with_overrides(overrides: &str) -> Result<Self, String> {
        let mut manager = Self::default();
        for entry in overrides.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, share) =
                entry.split_once('=').ok_or_else(|| format!("budget {entry:?}: expected name=share"))?;
            let share: f64 = share.trim().parse().map_err(|_| format!("budget {entry:?}: share is not a number"))?;
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("budget {entry:?}: share must be in [0, 1]"));
            }
            if !manager.shares.contains_key(name.trim()) {
                return Err(format!(
                    "budget {entry:?}: unknown provider (memory, relationship, knowledge, working_memory, mood, recall)"
                ));
            }
            manager.shares.insert(name.trim().to_owned(), share);
        }
        if manager.shares.values().sum::<f64>() > 1.0 + 1e-9 {
            return Err("budget shares sum to more than 1".into());
        }
        Ok(manager)
    }

    pub fn allocate(&self, provider: &str, max_tokens: u32) -> u32 {
        (f64::from(max_tokens) * self.shares.get(provider).copied().unwrap_or(0.0)) as u32
    }

    /// Splits `pool` tokens between the sections that have content, `needs` giving what
    /// each would use unbounded: each gets its share of the pool in proportion to the
    /// shares of the sections still wanting more, what a section leaves unused flows to
    /// those, until every need is met or the pool is spent. A section with a zero share
    /// gets nothing. Never hands out more than `pool` in all.
    pub fn distribute(&self, pool: usize, needs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        let mut granted: BTreeMap<String, usize> = needs.iter().map(|(name, _)| ((*name).to_owned(), 0)).collect();
        let share = |name: &str| self.shares.get(name).copied().unwrap_or(0.0);
        let mut wanting: Vec<(&str, usize)> =
            needs.iter().copied().filter(|&(name, need)| need > 0 && share(name) > 0.0).collect();
        let mut remaining = pool;
        while remaining > 0 && !wanting.is_empty() {
            let total_share: f64 = wanting.iter().map(|(name, _)| share(name)).sum();
            let mut handed = 0;
            for (name, need) in &wanting {
                let offer = ((remaining as f64) * share(name) / total_share).floor() as usize;
                let have = granted[*name];
                let give = offer.min(need - have);
                *granted.get_mut(*name).expect("every wanting section was granted 0") += give;
                handed += give;
            }
            if handed == 0 {
                // Offers rounded down to nothing: the rest goes to the largest share still wanting.
                let (name, need) = *wanting
                    .iter()
                    .max_by(|a, b| share(a.0).total_cmp(&share(b.0)))
                    .expect("the loop runs only while some section wants more");
                let give = remaining.min(need - granted[name]);
                *granted.get_mut(name).expect("granted above") += give;
                handed = give;
            }
            remaining -= handed;
            wanting.retain(|(name, need)| granted[*name] < *need);
        }
        debug_assert!(granted.values().sum::<usize>() <= pool);
        granted
    }
}

/// The default system prompt for a persona: who the NPC is, what it will and will not
/// discuss, then `{reputation}` and `{memory_context}`.
pub const DEFAULT_TEMPLATE: &str =
    "You are {name}, {role}. Personality: {personality}. Speaking style: {speaking_style}.
You know about: {knowledge_domains}.{will_discuss}{wont_discuss}{secret_knowledge}
How you see the player: {reputation}.

{memory_context}

Stay in character and answer as {name} would.";

/// Renders `template` (or [`DEFAULT_TEMPLATE`]) with the persona and the placeholders.
pub fn render_prompt(template: Option<&str>, persona: &Persona, placeholders: &BTreeMap<String, String>) -> String {
    let list = |items: &[String], label: &str| {
        if items.is_empty() { String::new() } else { format!("\n{label}: {}.", items.join(", ")) }
    };
    let values: Vec<(&str, String)> = vec![
        ("name", persona.name.clone()),
        ("role", persona.role.clone().unwrap_or_else(|| "a local".into())),
        ("personality", persona.personality.clone()),
        ("speaking_style", persona.speaking_style.clone()),
        (
            "knowledge_domains",
            if persona.knowledge_domains.is_empty() {
                "everyday life".into()
            } else {
                persona.knowledge_domains.join(", ")
            },
        ),
        ("will_discuss", list(&persona.will_discuss, "You are glad to discuss")),
        ("wont_discuss", list(&persona.wont_discuss, "You refuse to discuss")),
        ("secret_knowledge", list(&persona.secret_knowledge, "You secretly know (never reveal it unprompted)")),
    ];
    let mut lookup: HashMap<&str, &str> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    lookup.extend(placeholders.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    // One pass: text that came in through a value is never substituted again.
    let template = template.unwrap_or(DEFAULT_TEMPLATE);
    let mut text = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| (&after[..close], close)) {
            Some((key, close)) if lookup.contains_key(key) => {
                text.push_str(lookup[key]);
                rest = &after[close + 1..];
            }
            _ => {
                text.push('{');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text
}

#[cfg(test)]
mod tests;
