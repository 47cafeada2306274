//! Prompt context: ranking memories for the current message,
//! formatting them with ages, the relationship summary and `{reputation}`, the budget
//! split between providers, and the default system prompt.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use chrono::{DateTime, Datelike, Utc};

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
    /// Each memory's recall terms (stemmed), sorted: whether a line matches a message is
    /// asked per request, and stemming every line each time cost ~8 µs a memory.
    stems: Vec<Box<[String]>>,
}

impl RelevanceIndex {
    pub fn build(memories: &[ContextMemory]) -> Self {
        // A pair's memories repeat their words: each distinct written word is analysed once
        // (building the index is most of a cold load's work after the reads).
        type Memo<'w, T> = HashMap<&'w str, T, foldhash::fast::RandomState>;
        let mut relevance_term: Memo<Option<String>> = Memo::default();
        let mut recall_term: Memo<Option<String>> = Memo::default();
        let mut postings: HashMap<String, Vec<(u32, f64)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(memories.len());
        let mut stems = Vec::with_capacity(memories.len());
        let mut counts: Vec<(String, f64)> = Vec::new();
        for (index, memory) in memories.iter().enumerate() {
            let words = memory.content.split(|c: char| !c.is_alphanumeric());
            let tag_words = memory.tags.iter().flat_map(|tag| tag.split(|c: char| !c.is_alphanumeric()));
            for word in words.chain(tag_words).filter(|word| !word.is_empty()) {
                let term = relevance_term.entry(word).or_insert_with(|| terms(word).next());
                if let Some(term) = term.as_deref() {
                    match counts.iter_mut().find(|(known, _)| known == term) {
                        Some((_, count)) => *count += 1.0,
                        None => counts.push((term.to_owned(), 1.0)),
                    }
                }
            }
            lengths.push(counts.iter().map(|(_, count)| count).sum::<f64>().max(1.0));
            for (term, count) in counts.drain(..) {
                postings.entry(term).or_default().push((index as u32, count));
            }
            let mut memory_stems: Vec<String> = memory
                .content
                .split(|c: char| !c.is_alphanumeric())
                .filter(|word| !word.is_empty())
                .filter_map(|word| recall_term.entry(word).or_insert_with(|| crate::recall::term(word)).clone())
                .chain(crate::recall::hyphen_joined(&memory.content).filter_map(|word| crate::recall::term(&word)))
                .collect();
            memory_stems.sort_unstable();
            memory_stems.dedup();
            stems.push(memory_stems.into_boxed_slice());
        }
        let average = if lengths.is_empty() { 1.0 } else { lengths.iter().sum::<f64>() / lengths.len() as f64 };
        Self { postings, lengths, average, stems }
    }

    /// Bytes the index holds, roughly (for cache weighing): its postings and each
    /// memory's stems, with the allocator's overhead.
    pub fn approximate_bytes(&self) -> usize {
        let postings: usize = self
            .postings
            .iter()
            .map(|(term, list)| crate::heap_bytes(term.len()) + crate::heap_bytes(list.capacity() * 16) + 56)
            .sum();
        let stems: usize = self
            .stems
            .iter()
            .map(|stems| {
                crate::heap_bytes(stems.len() * 24) + stems.iter().map(|s| crate::heap_bytes(s.len())).sum::<usize>()
            })
            .sum();
        postings + stems + self.lengths.len() * 8
    }

    /// Whether memory `position`'s content shares one of `message_terms` (recall's
    /// stemmed terms).
    pub fn shares_a_term(&self, position: usize, message_terms: &HashSet<String>) -> bool {
        // A message has a few terms, a memory more: search each term in the sorted stems.
        self.stems.get(position).is_some_and(|stems| message_terms.iter().any(|term| stems.binary_search(term).is_ok()))
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

/// Ranking: locked memories first, then salience × (0.5 + 0.5 · relevance),
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
    rank_scored(memories, index, message, now).into_iter().map(|(memory, _, _)| memory).collect()
}

/// [`rank_indexed`], each memory with its relevance to the message in [0, 1] (0 without
/// a message or when it shares no word with it) and its position in `memories`.
pub fn rank_scored<'a>(
    memories: &'a [ContextMemory],
    index: &RelevanceIndex,
    message: Option<&str>,
    now: DateTime<Utc>,
) -> Vec<(&'a ContextMemory, f64, usize)> {
    let saliences: Vec<f64> = memories.iter().map(|memory| memory.salience(now)).collect();
    rank_with_saliences(memories, &saliences, index, message)
}

/// [`rank_scored`] with each memory's salience already computed (`saliences[i]` is
/// `memories[i]`'s).
pub fn rank_with_saliences<'a>(
    memories: &'a [ContextMemory],
    saliences: &[f64],
    index: &RelevanceIndex,
    message: Option<&str>,
) -> Vec<(&'a ContextMemory, f64, usize)> {
    debug_assert_eq!(memories.len(), saliences.len(), "one salience a memory");
    let relevance = match message {
        Some(message) if !memories.is_empty() => index.score(message),
        _ => vec![0.0; memories.len()],
    };
    let mut scored: Vec<(bool, f64, &ContextMemory, f64, usize)> = memories
        .iter()
        .zip(relevance)
        .zip(saliences)
        .enumerate()
        .map(|(position, ((memory, relevance), salience))| {
            (memory.locked, salience * (0.5 + 0.5 * relevance), memory, relevance, position)
        })
        .collect();
    // Unstable is enough: the id makes every key distinct.
    scored.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(b.2.created_at.cmp(&a.2.created_at)).then(a.2.id.cmp(&b.2.id))
    });
    scored.into_iter().map(|(_, _, memory, relevance, position)| (memory, relevance, position)).collect()
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

/// `now` at the start of its minute: the clock the ages in a reply are read from, so the
/// memory lines kept for a minute ([`MemoryLines`]) agree with the lines formatted per
/// request.
pub fn minute_start(now: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(now.timestamp().div_euclid(60) * 60, 0).unwrap_or(now)
}

/// The months' English names, January first.
pub const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// An age with its date from a day old on: "2 hours ago", "yesterday, on 7 May 2023",
/// "3 weeks ago, on 8 May 2023". The date answers "when did …" where an age alone needs
/// the reader to know today's date.
pub fn format_when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let age = format_age(at, now);
    if (now - at).num_seconds() < 86_400 {
        return age;
    }
    // Written out by hand: chrono's `format("%-d %B %Y")` parses its pattern on every
    // call, and a warm enrich request dates every memory line and recall heading.
    let month = MONTHS[at.month0() as usize];
    format!("{age}, on {} {month} {}", at.day(), at.year())
}

pub const MEMORY_HEADER: &str = "Your memories of this player:";
pub const NO_MEMORIES: &str = "You have no specific memories of this player.";

/// One line of the memory section: the content, its age and how much it matters, in
/// plain words (the original design's icons and stars cost tokens and read as noise to a model).
pub fn memory_line(memory: &ContextMemory, now: DateTime<Utc>) -> String {
    let weight = match (memory.importance.clamp(0.0, 1.0) * 3.0 + 1.0) as usize {
        0 | 1 => "minor",
        2 => "notable",
        3 => "important",
        _ => "unforgettable",
    };
    format!("- {} ({}, {weight})", memory.content, format_when(memory.created_at, now))
}

/// A pair's memory lines with their tokens, formatted at most once a minute: the ages in
/// them are read to the minute (from the clock at the minute's start), so the warm
/// requests of a talk format and count none.
#[derive(Debug, Default)]
pub struct MemoryLines {
    current: Mutex<Option<Arc<MinuteLines>>>,
}

/// The memory lines of one minute, each formatted when first asked for.
#[derive(Debug)]
pub struct MinuteLines {
    /// The minute's start: the clock the lines are dated by.
    clock: DateTime<Utc>,
    lines: Vec<OnceLock<(Arc<str>, usize)>>,
    saliences: OnceLock<Vec<f64>>,
}

impl MemoryLines {
    /// The lines of `now`'s minute for `count` memories (a fresh set once the minute turns).
    pub fn at(&self, count: usize, now: DateTime<Utc>) -> Arc<MinuteLines> {
        let clock = minute_start(now);
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &*current {
            Some(lines) if lines.clock == clock && lines.lines.len() == count => Arc::clone(lines),
            _ => {
                let lines = (0..count).map(|_| OnceLock::new()).collect();
                let fresh = Arc::new(MinuteLines { clock, lines, saliences: OnceLock::new() });
                *current = Some(Arc::clone(&fresh));
                fresh
            }
        }
    }
}

impl MinuteLines {
    /// Each memory's salience at the minute's start (salience decays over weeks).
    pub fn saliences(&self, memories: &[ContextMemory]) -> &[f64] {
        self.saliences.get_or_init(|| memories.iter().map(|memory| memory.salience(self.clock)).collect())
    }

    /// Memory `position`'s [`memory_line`] and its tokens with the line break.
    pub fn line(&self, position: usize, memory: &ContextMemory) -> (Arc<str>, usize) {
        let format = || {
            let text = memory_line(memory, self.clock);
            let tokens = packing::line_tokens(&text);
            (Arc::from(text), tokens)
        };
        match self.lines.get(position) {
            Some(cell) => cell.get_or_init(format).clone(),
            // Not a position of the set's memories: formatted on the spot, not kept.
            None => format(),
        }
    }
}

/// Seed `_format_relationship`, with the attitude read from the dimensions that stand
/// out instead of the disposition alone (which left most NPCs "neutral"): "Relationship:
/// Rival. You are afraid of them, distrust them and dislike them." An overall tone leads
/// when the disposition is strong (warm, or hostile); when no single feeling stands out
/// the disposition's lean is named, and "neutral" only when there is none.
pub fn relationship_summary(relationship: &Relationship) -> String {
    let stage = title_case(&relationship.stage.as_str().replace('_', " "));
    let feelings = strongest_feelings(relationship, 3);
    let tone = relationship_tone(relationship);
    let attitude = match (tone, feelings.is_empty()) {
        (None, true) => match relationship.disposition {
            // Nothing stands out yet, but the small changes lean one way.
            d if d >= 0.05 => "You are well disposed toward them".to_owned(),
            d if d <= -0.05 => "You are ill disposed toward them".to_owned(),
            _ => "You have neutral feelings toward them".to_owned(),
        },
        (None, false) => format!("You {}", join_feelings(&feelings)),
        (Some(tone), true) => tone.to_owned(),
        (Some(tone), false) => format!("{tone}: you {}", join_feelings(&feelings)),
    };
    format!("Relationship: {stage}. {attitude}.")
}

/// The overall tone, only when the disposition (or trust, which alone makes an enemy)
/// is far from the middle.
fn relationship_tone(relationship: &Relationship) -> Option<&'static str> {
    let disposition = relationship.disposition;
    if disposition <= -0.45 || relationship.get(Dimension::Trust) < 0.2 {
        Some("You are hostile toward them")
    } else if disposition >= 0.5 {
        Some("You regard them very warmly")
    } else if disposition >= 0.2 {
        Some("You feel warmly toward them")
    } else {
        None
    }
}

/// How far a dimension stands from where a relationship starts (0.5, or 0 for fear and
/// romantic interest) before it is worth a word.
const FEELING_STANDS_OUT: f64 = 0.1;

/// The feelings that stand out, strongest first (ties in dimension order), at most
/// `limit`, as verb phrases after "You": "are afraid of them", "trust them".
fn strongest_feelings(relationship: &Relationship, limit: usize) -> Vec<&'static str> {
    let mut feelings: Vec<(f64, &'static str)> =
        Dimension::ALL.into_iter().filter_map(|dimension| feeling(dimension, relationship.get(dimension))).collect();
    // Stable: equal strengths keep the dimension order.
    feelings.sort_by(|a, b| b.0.total_cmp(&a.0));
    feelings.into_iter().take(limit).map(|(_, words)| words).collect()
}

/// A dimension's value in words, with how strongly it stands out; None when it does not.
fn feeling(dimension: Dimension, value: f64) -> Option<(f64, &'static str)> {
    let (strength, words) = match dimension {
        Dimension::Fear => (
            value,
            match value {
                v if v > 0.7 => "are terrified of them",
                v if v >= 0.35 => "are afraid of them",
                v if v >= 0.15 => "are wary of them",
                _ => return None,
            },
        ),
        Dimension::RomanticInterest => (
            value,
            match value {
                v if v >= 0.6 => "are in love with them",
                v if v >= 0.3 => "are drawn to them",
                _ => return None,
            },
        ),
        _ => {
            let departure = value - 0.5;
            if departure.abs() < FEELING_STANDS_OUT - 1e-9 {
                return None;
            }
            let words = match (dimension, departure > 0.0, departure.abs() >= 0.3) {
                (Dimension::Trust, true, true) => "trust them completely",
                (Dimension::Trust, true, false) => "trust them",
                (Dimension::Trust, false, _) => "distrust them",
                (Dimension::Friendliness, true, true) => "are very fond of them",
                (Dimension::Friendliness, true, false) => "like them",
                (Dimension::Friendliness, false, true) => "despise them",
                (Dimension::Friendliness, false, false) => "dislike them",
                (Dimension::Respect, true, true) => "admire them",
                (Dimension::Respect, true, false) => "respect them",
                (Dimension::Respect, false, _) => "look down on them",
                (Dimension::Loyalty, true, _) => "feel loyal to them",
                (Dimension::Loyalty, false, _) => "feel no loyalty to them",
                (Dimension::Fear | Dimension::RomanticInterest, _, _) => return None,
            };
            (departure.abs(), words)
        }
    };
    Some((strength, words))
}

/// "a", "a and b", "a, b and c".
fn join_feelings(feelings: &[&str]) -> String {
    match feelings {
        [] => String::new(),
        [only] => (*only).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
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

/// `{reputation}`: the stage plus descriptors; for a stranger, the player's
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

/// The original design's Token Management shares (of `max_tokens`) per provider; overridable.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetManager {
    shares: BTreeMap<String, f64>,
}

impl Default for BudgetManager {
    /// memory 25 %, relationship 10 %, knowledge 10 % (the original design's); working memory 10 %,
    /// mood 5 % and recalled moments 25 % from the original design's unallocated pool. What a section
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

/// The default system prompt for a persona: who the NPC is (`{persona_details}` holds
/// only the parts the persona gives), what it will and will not discuss, then
/// `{reputation}` and `{memory_context}`.
pub const DEFAULT_TEMPLATE: &str =
    "You are {name}, {role}.{persona_details}{will_discuss}{wont_discuss}{secret_knowledge}
How you see the player: {reputation}.

{memory_context}

Stay in character and answer as {name} would.";

/// Renders `template` (or [`DEFAULT_TEMPLATE`]) with the persona and the placeholders.
pub fn render_prompt(template: Option<&str>, persona: &Persona, placeholders: &BTreeMap<String, String>) -> String {
    let list = |items: &[String], label: &str| {
        if items.is_empty() { String::new() } else { format!("\n{label}: {}.", items.join(", ")) }
    };
    // A part the persona leaves out is left out of the prompt, never rendered empty.
    let part = |value: &str, label: &str, separator: &str| {
        let value = value.trim().trim_end_matches('.');
        if value.is_empty() { String::new() } else { format!("{separator}{label}: {value}.") }
    };
    let persona_details = [
        part(&persona.personality, "Personality", " "),
        part(&persona.speaking_style, "Speaking style", " "),
        part(&persona.knowledge_domains.join(", "), "You know about", "\n"),
    ]
    .concat();
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
        ("persona_details", persona_details),
        ("will_discuss", list(&persona.will_discuss, "You are glad to discuss")),
        ("wont_discuss", list(&persona.wont_discuss, "You refuse to discuss")),
        ("secret_knowledge", list(&persona.secret_knowledge, "You secretly know (never reveal it unprompted)")),
    ];
    let mut lookup: HashMap<&str, &str> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    lookup.extend(placeholders.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    // One pass: text that came in through a value is never substituted again.
    let is_default = template.is_none();
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
    if is_default {
        // An empty section (no memories yet) leaves no run of blank lines behind.
        while text.contains("\n\n\n") {
            text = text.replace("\n\n\n", "\n\n");
        }
    }
    text
}

pub mod packing;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod relationship_summary_tests {
    use super::relationship_summary;
    use crate::relationship::{Dimension, Relationship, Stage, disposition};

    fn relationship(stage: Stage, values: &[(Dimension, f64)]) -> Relationship {
        let mut relationship = Relationship::initial(0.0);
        for (dimension, value) in values {
            relationship.dims[dimension.index()] = *value;
        }
        relationship.disposition = disposition(&relationship.dims);
        relationship.stage = stage;
        relationship.interaction_count = 1;
        relationship
    }

    #[test]
    fn a_frightened_npc_is_afraid() {
        let afraid = relationship(Stage::Rival, &[(Dimension::Fear, 0.4), (Dimension::Trust, 0.35)]);
        assert_eq!(relationship_summary(&afraid), "Relationship: Rival. You are afraid of them and distrust them.");
        let terrified = relationship(Stage::Enemy, &[(Dimension::Fear, 0.9)]);
        assert!(
            relationship_summary(&terrified).contains("are terrified of them"),
            "{}",
            relationship_summary(&terrified)
        );
        let wary = relationship(Stage::Acquaintance, &[(Dimension::Fear, 0.2)]);
        assert_eq!(relationship_summary(&wary), "Relationship: Acquaintance. You are wary of them.");
    }

    #[test]
    fn a_trusting_npc_trusts() {
        let trusting = relationship(Stage::Acquaintance, &[(Dimension::Trust, 0.65)]);
        assert_eq!(relationship_summary(&trusting), "Relationship: Acquaintance. You trust them.");
        let ally = relationship(
            Stage::TrustedAlly,
            &[(Dimension::Trust, 0.9), (Dimension::Loyalty, 0.8), (Dimension::Friendliness, 0.8)],
        );
        assert_eq!(
            relationship_summary(&ally),
            "Relationship: Trusted Ally. You regard them very warmly: you trust them completely, feel loyal to them \
             and are very fond of them."
        );
    }

    #[test]
    fn a_hostile_npc_is_hostile() {
        let hostile = relationship(
            Stage::Enemy,
            &[(Dimension::Trust, 0.15), (Dimension::Friendliness, 0.18), (Dimension::Fear, 0.1)],
        );
        assert_eq!(
            relationship_summary(&hostile),
            "Relationship: Enemy. You are hostile toward them: you distrust them and despise them."
        );
    }

    #[test]
    fn a_rescued_npc_feels_warmly() {
        // What one severe rescue leaves (docs/relationships.md, canonical scenes).
        let rescued = relationship(
            Stage::Friend,
            &[
                (Dimension::Trust, 0.7),
                (Dimension::Respect, 0.646),
                (Dimension::Loyalty, 0.666),
                (Dimension::Friendliness, 0.652),
            ],
        );
        assert_eq!(
            relationship_summary(&rescued),
            "Relationship: Friend. You feel warmly toward them: you trust them, feel loyal to them and like them."
        );
    }

    #[test]
    fn neutral_only_when_nothing_stands_out() {
        let met = relationship(Stage::Acquaintance, &[]);
        assert_eq!(relationship_summary(&met), "Relationship: Acquaintance. You have neutral feelings toward them.");
        let barely_moved = relationship(
            Stage::Acquaintance,
            &[(Dimension::Trust, 0.59), (Dimension::Friendliness, 0.41), (Dimension::Fear, 0.14)],
        );
        assert!(relationship_summary(&barely_moved).contains("neutral"));
        let disliked = relationship(Stage::Acquaintance, &[(Dimension::Friendliness, 0.4)]);
        assert_eq!(relationship_summary(&disliked), "Relationship: Acquaintance. You dislike them.");
        // One good turn: nothing stands out, but it leans warm.
        let helped_once = relationship(
            Stage::Acquaintance,
            &[(Dimension::Trust, 0.546), (Dimension::Friendliness, 0.546), (Dimension::Loyalty, 0.512)],
        );
        assert_eq!(
            relationship_summary(&helped_once),
            "Relationship: Acquaintance. You are well disposed toward them."
        );
        let snubbed = relationship(Stage::Acquaintance, &[(Dimension::Trust, 0.45), (Dimension::Friendliness, 0.45)]);
        assert_eq!(relationship_summary(&snubbed), "Relationship: Acquaintance. You are ill disposed toward them.");
    }

    #[test]
    fn the_strongest_feelings_come_first_and_at_most_three() {
        let mixed = relationship(
            Stage::Rival,
            &[
                (Dimension::Trust, 0.3),
                (Dimension::Fear, 0.5),
                (Dimension::Respect, 0.75),
                (Dimension::Loyalty, 0.35),
                (Dimension::Friendliness, 0.45),
            ],
        );
        assert_eq!(
            relationship_summary(&mixed),
            "Relationship: Rival. You are afraid of them, respect them and distrust them."
        );
    }
}
