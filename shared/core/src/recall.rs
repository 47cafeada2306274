//! Recall over the verbatim episodic store: every redacted turn a pair ever
//! exchanged, ranked for the current message and packed into the prompt as dated,
//! speaker-attributed lines.
//!
//! Lexical ranking is BM25 over Snowball-stemmed terms with the NLTK English stop words
//! removed; the speaker's name counts as a term of each turn, so "what did Caroline
//! paint?" prefers Caroline's own turns. Dense similarity, when an embedder is
//! configured, is fused with reciprocal-rank fusion ([`fuse`]). The text analysis comes
//! from well-kept crates (`rust-stemmers`, `stop-words`); only the ranking and packing
//! rules live here.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, OnceLock};

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::context::format_when;
use crate::tokens::{count_tokens, count_tokens_cached};
use crate::wire::Speaker;

/// One turn of a recorded conversation, as recall holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub conversation_id: Uuid,
    /// Position in its conversation, from 0.
    pub turn: u32,
    pub speaker: Speaker,
    /// The speaker's character name when known (indexed, not shown).
    pub speaker_name: Option<String>,
    pub text: String,
    pub said_at: DateTime<Utc>,
}

/// When turn `index` of `count` was said: spread evenly between the conversation's start
/// and end (the game sends no per-turn times). A clock that runs backwards gives `ended_at`.
pub fn turn_time(started_at: DateTime<Utc>, ended_at: DateTime<Utc>, index: usize, count: usize) -> DateTime<Utc> {
    if count <= 1 || ended_at <= started_at {
        return ended_at.max(started_at);
    }
    let span = (ended_at - started_at).num_milliseconds();
    let offset = span * index.min(count - 1) as i64 / (count - 1) as i64;
    started_at + TimeDelta::milliseconds(offset)
}

static STOP_WORDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| stop_words::lookup("en").unwrap_or_default().iter().copied().collect());
static STEMMER: LazyLock<rust_stemmers::Stemmer> =
    LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// The index terms of `text`: lowercase alphanumeric words, stop words and single
/// characters dropped, each reduced to its Snowball English stem ("painted", "painting"
/// and "paints" all give "paint"); a hyphenated word also counts joined, so "de-stress"
/// meets "destress" and "e-mail" meets "email".
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_owned)
        .chain(hyphen_joined(text))
        .filter_map(|word| term(&word))
        .collect()
}

/// One written word's term: None for a stop word or a single character.
pub(crate) fn term(word: &str) -> Option<String> {
    // Single characters are no terms.
    word.chars().nth(1)?;
    let lower = word.to_lowercase();
    (!STOP_WORDS.contains(lower.as_str())).then(|| STEMMER.stem(&lower).into_owned())
}

/// The hyphenated words of `text` with their hyphens dropped ("de-stress" gives
/// "destress"); people write either form, and one form's stem is not the other's.
pub fn hyphen_joined(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .filter(|word| word.contains('-'))
        .map(|word| word.trim_matches('-'))
        .filter(|word| word.contains('-') && !word.contains("--"))
        .map(|word| word.replace('-', ""))
}

/// BM25 parameters (the usual k1 1.2, b 0.75).
const K1: f64 = 1.2;
const B: f64 = 0.75;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;

/// An inverted index over one pair's turns, built once when the pair is loaded so that a
/// request walks only the postings of its own terms.
#[derive(Debug, Clone, Default)]
pub struct TurnIndex {
    vocabulary: FastMap<String, u32>,
    /// Per term id: (turn position, occurrences).
    postings: Vec<Vec<(u32, u16)>>,
    lengths: Vec<u32>,
    average_length: f64,
}

/// A word no term stands for (a stop word or a single character).
const NO_TERM: u32 = u32::MAX;

/// The term id of one written word, adding its stem to the vocabulary if new.
fn term_id(word: &str, vocabulary: &mut FastMap<String, u32>, postings: &mut Vec<Vec<(u32, u16)>>) -> u32 {
    let Some(term) = term(word) else { return NO_TERM };
    let next = vocabulary.len() as u32;
    let id = *vocabulary.entry(term).or_insert(next);
    if id == next {
        postings.push(Vec::new());
    }
    id
}

impl TurnIndex {
    /// Builds the index; each distinct written word is analysed once (a pair's turns
    /// repeat their words, and stemming is most of the cost of a cold load).
    pub fn build(turns: &[Turn]) -> Self {
        let mut vocabulary: FastMap<String, u32> = FastMap::default();
        let mut postings: Vec<Vec<(u32, u16)>> = Vec::new();
        let mut seen: FastMap<&str, u32> = FastMap::default();
        let mut lengths = Vec::with_capacity(turns.len());
        let mut ids: Vec<u32> = Vec::new();
        for turn in turns {
            ids.clear();
            let words = turn.text.split(|c: char| !c.is_alphanumeric());
            let names = turn.speaker_name.as_deref().unwrap_or_default().split(|c: char| !c.is_alphanumeric());
            for word in words.chain(names).filter(|word| !word.is_empty()) {
                let id = match seen.get(word) {
                    Some(&id) => id,
                    None => {
                        let id = term_id(word, &mut vocabulary, &mut postings);
                        seen.insert(word, id);
                        id
                    }
                };
                if id != NO_TERM {
                    ids.push(id);
                }
            }
            if turn.text.contains('-') {
                for joined in hyphen_joined(&turn.text) {
                    let id = term_id(&joined, &mut vocabulary, &mut postings);
                    if id != NO_TERM {
                        ids.push(id);
                    }
                }
            }
            ids.sort_unstable();
            lengths.push((ids.len() as u32).max(1));
            let position = lengths.len() as u32 - 1;
            for run in ids.chunk_by(|a, b| a == b) {
                postings[run[0] as usize].push((position, u16::try_from(run.len()).unwrap_or(u16::MAX)));
            }
        }
        let average_length = if lengths.is_empty() {
            1.0
        } else {
            lengths.iter().map(|&l| f64::from(l)).sum::<f64>() / lengths.len() as f64
        };
        Self { vocabulary, postings, lengths, average_length }
    }

    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Bytes the index holds, roughly (for cache weighing).
    pub fn approximate_bytes(&self) -> usize {
        self.vocabulary.keys().map(|term| crate::heap_bytes(term.len()) + 40).sum::<usize>()
            + self.postings.iter().map(|list| crate::heap_bytes(list.capacity() * 8) + 24).sum::<usize>()
            + self.lengths.capacity() * 4
    }

    /// The terms of `message` that pick something out of this pair's history: those in
    /// at most a tenth of its turns (and at most 3 turns in a short history). The pair's
    /// own names (each turn indexes its speaker's) and the words two people use all the
    /// time match nearly everything, so they do not make a line relevant.
    pub fn informative_terms(&self, message: &str) -> HashSet<String> {
        let limit = (self.lengths.len() / 10).max(3);
        terms(message)
            .into_iter()
            .filter(|term| self.vocabulary.get(term).is_none_or(|&id| self.postings[id as usize].len() <= limit))
            .collect()
    }

    /// The turns that share a term with `query`, best first, as (position, BM25 score);
    /// equal scores put the later turn first.
    pub fn search(&self, query: &str) -> Vec<(usize, f64)> {
        let query_terms: HashSet<String> = terms(query).into_iter().collect();
        // One slot a turn: cheaper than a map for the hundreds of postings a question walks.
        let mut scores = vec![0.0_f64; self.lengths.len()];
        let count = self.lengths.len() as f64;
        for term in &query_terms {
            let Some(&id) = self.vocabulary.get(term) else { continue };
            let postings = &self.postings[id as usize];
            let containing = postings.len() as f64;
            let idf = ((count - containing + 0.5) / (containing + 0.5) + 1.0).ln();
            for &(position, frequency) in postings {
                let frequency = f64::from(frequency);
                let length = f64::from(self.lengths[position as usize]);
                scores[position as usize] +=
                    idf * frequency * (K1 + 1.0) / (frequency + K1 * (1.0 - B + B * length / self.average_length));
            }
        }
        let mut ranked: Vec<(usize, f64)> = scores.into_iter().enumerate().filter(|(_, score)| *score > 0.0).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked
    }
}

/// Reciprocal-rank fusion (Cormack et al. 2009) of several rankings of the same turns:
/// each list adds weight / (k + rank) to a turn's score; best first, ties later turn
/// first. k = 60 is the paper's constant.
pub fn fuse(rankings: &[(&[usize], f64)], k: f64) -> Vec<(usize, f64)> {
    let mut scores: HashMap<usize, f64> = HashMap::new();
    for (ranking, weight) in rankings {
        for (rank, &position) in ranking.iter().enumerate() {
            *scores.entry(position).or_insert(0.0) += weight / (k + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(usize, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    fused
}

/// The dense ranking's weight in the fusion. The dense list ranks every turn, the lexical
/// one only turns sharing a word with the question: at equal weight the nearest turns by
/// embedding pushed exact word matches (and the replies shown after the best hits) out
/// of the section on the bench's tuning half.
pub const DENSE_WEIGHT: f64 = 0.5;

/// The lexical ranking fused with the dense one: (position, score), best first.
pub fn hybrid_scores(lexical: &[usize], dense: &[usize]) -> Vec<(usize, f64)> {
    fuse(&[(lexical, 1.0), (dense, DENSE_WEIGHT)], 60.0)
}

/// Sentence vectors aligned with a pair's turns; a turn embedded by no one has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnVectors {
    dims: usize,
    values: Vec<f32>,
    present: Vec<bool>,
}

impl TurnVectors {
    pub fn new(dims: usize) -> Self {
        Self { dims, values: Vec::new(), present: Vec::new() }
    }

    /// Appends the next turn's vector; one of another length counts as none.
    pub fn push(&mut self, vector: Option<&[f32]>) {
        match vector.filter(|vector| vector.len() == self.dims && self.dims > 0) {
            Some(vector) => {
                self.values.extend_from_slice(vector);
                self.present.push(true);
            }
            None => {
                self.values.extend(std::iter::repeat_n(0.0, self.dims));
                self.present.push(false);
            }
        }
    }

    pub fn get(&self, position: usize) -> Option<&[f32]> {
        let start = position * self.dims;
        self.present.get(position).filter(|present| **present).map(|_| &self.values[start..start + self.dims])
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn len(&self) -> usize {
        self.present.len()
    }

    pub fn is_empty(&self) -> bool {
        self.present.is_empty()
    }

    /// Whether any turn has a vector.
    pub fn any(&self) -> bool {
        self.present.iter().any(|present| *present)
    }

    pub fn approximate_bytes(&self) -> usize {
        self.values.len() * 4 + self.present.len()
    }
}

/// Positions of the `limit` turns most similar to `query_vector` (cosine), best first;
/// turns without a vector are skipped.
pub fn dense_ranking(query_vector: &[f32], vectors: &TurnVectors, limit: usize) -> Vec<usize> {
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let query_norm = norm(query_vector);
    if query_norm == 0.0 || query_vector.len() != vectors.dims() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, f32)> = (0..vectors.len())
        .filter_map(|position| {
            let vector = vectors.get(position)?;
            let dot: f32 = vector.iter().zip(query_vector).map(|(a, b)| a * b).sum();
            let vector_norm = norm(vector);
            (vector_norm > 0.0).then(|| (position, dot / (vector_norm * query_norm)))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    scored.into_iter().take(limit).map(|(position, _)| position).collect()
}

/// The ranking recall packs from: lexical alone, or fused with the dense ranking.
pub fn hybrid_ranking(lexical: &[usize], dense: Option<&[usize]>, limit: usize) -> Vec<usize> {
    match dense {
        Some(dense) if !dense.is_empty() => {
            hybrid_scores(lexical, dense).into_iter().take(limit).map(|(position, _)| position).collect()
        }
        _ => lexical.iter().copied().take(limit).collect(),
    }
}

pub const RECALL_HEADER: &str = "What you and this player said before:";

/// How the recalled-moments section is packed.
#[derive(Debug, Clone, PartialEq)]
pub struct PackRules {
    /// The reply that followed each of this many best hits is shown with it, for context.
    pub neighbours_of_top: usize,
    /// At most this many turns, however large the budget.
    pub max_turns: usize,
}

impl Default for PackRules {
    /// The reply after every hit: an answer often sits in the turn after the one that
    /// shares the question's words ("Where did you move from?" … "Sweden."). On the
    /// LoCoMo development conversations at 1,024 tokens, replies for every hit held the
    /// evidence of 2 points more questions than replies for the best three.
    fn default() -> Self {
        Self { neighbours_of_top: usize::MAX, max_turns: 200 }
    }
}

/// The shortest line costs about this much (`- you said: "Yes."` and its line break).
const MIN_LINE_TOKENS: usize = 8;
/// Hits in a row that did not fit, after which packing stops looking.
const MAX_MISSES: usize = 16;

/// About the tokens `ranked` would take if every turn were shown, without counting them
/// (a third of a token per byte, and the line's framing): what recall asks of the budget.
pub fn estimated_need(turns: &[Turn], ranked: &[usize]) -> usize {
    let lines: usize =
        ranked.iter().filter_map(|&position| turns.get(position)).map(|turn| turn.text.len() / 3 + 8).sum();
    if lines == 0 { 0 } else { lines + RECALL_HEADER.len() / 3 }
}

/// Each turn's line cost: the tokens of `- Aria: …` with the line break after it (0 for a
/// turn without text), counted the first time a request considers the turn and kept with
/// the pair, so a warm request formats and counts only the lines it shows.
#[derive(Debug, Clone, Default)]
pub struct LineCosts(Vec<OnceLock<LineCost>>);

#[derive(Debug, Clone, Copy)]
struct LineCost {
    tokens: u32,
    /// The text has no whitespace to collapse: the line shows it as it is.
    tidy: bool,
}

impl LineCosts {
    /// Room for `turns` turns, none counted yet.
    pub fn new(turns: usize) -> Self {
        Self((0..turns).map(|_| OnceLock::new()).collect())
    }

    fn of(&self, position: usize, turn: &Turn) -> LineCost {
        let count = || {
            let text = collapse_whitespace(&turn.text);
            let tidy = matches!(text, Cow::Borrowed(_));
            let tokens =
                if text.is_empty() { 0 } else { count_tokens_cached(&format!("{}\n", line_of(turn, &text))) as u32 };
            LineCost { tokens, tidy }
        };
        match self.0.get(position) {
            Some(cell) => *cell.get_or_init(count),
            None => count(),
        }
    }
}

/// The packed section: its text, its token count and the turns it shows, chronological.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedRecall {
    pub content: String,
    pub token_count: usize,
    pub turns: Vec<usize>,
}

/// A turn's line in the section, without its conversation's heading.
pub fn turn_line(turn: &Turn) -> String {
    line_of(turn, &collapse_whitespace(&turn.text))
}

/// `- You: …` for the NPC's own words, `- Aria: …` for the player's (`- They: …` when the
/// player's name is not known). A chat transcript's shape reads plainly to a model and
/// costs four tokens a line less than `- they said: "…"`: on the LoCoMo development
/// conversations at 1,024 tokens, a turn or two more per question.
fn line_of(turn: &Turn, collapsed: &str) -> String {
    let who = match turn.speaker {
        Speaker::Npc => "You",
        Speaker::Player => turn.speaker_name.as_deref().filter(|name| !name.trim().is_empty()).unwrap_or("They"),
    };
    format!("- {who}: {collapsed}")
}

/// The heading of one conversation's lines: when it happened, as an age and a date
/// ("3 weeks ago, on 8 May 2023:"), so "when did …" has an answer.
pub fn conversation_heading(said_at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{}:", capitalise(&format_when(said_at, now)))
}

/// Tokens of [`conversation_heading`] with its line break. A heading is a function of
/// the whole minutes since the conversation (under a day old) or the whole days and its
/// date (from a day old), so its count is kept per thread under those and the heading is
/// only formatted on a miss: a request weighs a heading for every conversation it looks at.
fn heading_cost(said_at: DateTime<Utc>, now: DateTime<Utc>) -> usize {
    thread_local! {
        static COSTS: std::cell::RefCell<FastMap<(i64, i64), usize>> = std::cell::RefCell::default();
    }
    const MAX_REMEMBERED: usize = 10_000;
    let elapsed = (now - said_at).num_seconds().max(0);
    let key =
        if elapsed < 86_400 { (-1, elapsed / 60) } else { (elapsed / 86_400, said_at.timestamp().div_euclid(86_400)) };
    COSTS.with(|costs| {
        if let Some(&cost) = costs.borrow().get(&key) {
            return cost;
        }
        let cost = count_tokens_cached(&format!("{}\n", conversation_heading(said_at, now)));
        let mut costs = costs.borrow_mut();
        if costs.len() >= MAX_REMEMBERED {
            costs.clear();
        }
        costs.insert(key, cost);
        cost
    })
}

/// Packs the best of `ranked` (positions into `turns`, best first) into at most `budget`
/// tokens: each hit, then the reply that followed it for the first
/// [`PackRules::neighbours_of_top`] hits, skipping any turn whose text another section
/// already shows (`shown`: that section's text). Lines are grouped by conversation under
/// their age, oldest first. None when nothing fits.
pub fn pack(
    turns: &[Turn],
    costs: &LineCosts,
    ranked: &[usize],
    budget: usize,
    shown: &[&str],
    rules: &PackRules,
    now: DateTime<Utc>,
) -> Option<PackedRecall> {
    let header_cost = count_tokens_cached(&format!("{RECALL_HEADER}\n"));
    let mut used = header_cost;
    let mut chosen: Vec<usize> = Vec::new();
    let mut chosen_set: FastSet<usize> = FastSet::default();
    let mut headed: FastSet<Uuid> = FastSet::default();
    let mut consider = |position: usize, used: &mut usize, chosen: &mut Vec<usize>| -> bool {
        let Some(turn) = turns.get(position) else { return true };
        if chosen_set.contains(&position) {
            return true;
        }
        let line = costs.of(position, turn);
        let mut cost = line.tokens as usize;
        if cost == 0 {
            return true;
        }
        if !headed.contains(&turn.conversation_id) {
            cost += heading_cost(turn.said_at, now);
        }
        if *used + cost > budget {
            return false;
        }
        // Only for a turn that fits: scanning the other sections costs more than the rest.
        if !shown.is_empty() {
            let text = if line.tidy { Cow::Borrowed(turn.text.as_str()) } else { collapse_whitespace(&turn.text) };
            if shown.iter().any(|section| memchr::memmem::find(section.as_bytes(), text.as_bytes()).is_some()) {
                return true;
            }
        }
        *used += cost;
        headed.insert(turn.conversation_id);
        chosen_set.insert(position);
        chosen.push(position);
        true
    };
    // A hit that does not fit may leave room for a shorter later one, but a full budget
    // stops the walk: on a warm request the lines considered are most of the cost.
    let mut misses = 0;
    for (rank, &position) in ranked.iter().enumerate() {
        if chosen.len() >= rules.max_turns || budget.saturating_sub(used) < MIN_LINE_TOKENS || misses >= MAX_MISSES {
            break;
        }
        if !consider(position, &mut used, &mut chosen) {
            misses += 1;
        }
        if rank < rules.neighbours_of_top {
            let next = position + 1;
            if turns.get(next).is_some_and(|t| t.conversation_id == turns[position].conversation_id) {
                consider(next, &mut used, &mut chosen);
            }
        }
    }
    // Shown oldest first; shed from the end of the rank order if the exact count is over.
    let chronological = |positions: &[usize]| {
        let mut sorted = positions.to_vec();
        sorted.sort_by(|&a, &b| {
            let (x, y) = (&turns[a], &turns[b]);
            x.said_at.cmp(&y.said_at).then(x.conversation_id.cmp(&y.conversation_id)).then(x.turn.cmp(&y.turn))
        });
        sorted
    };
    while !chosen.is_empty() {
        let positions = chronological(&chosen);
        let (content, token_count) = render_counted(turns, costs, header_cost, &positions, now);
        if token_count <= budget {
            return Some(PackedRecall { content, token_count, turns: positions });
        }
        chosen.pop();
    }
    None
}

/// The section text for `positions` (chronological) and its exact token count, from the
/// kept costs: every line of the section starts with a character that is not whitespace,
/// so [`count_tokens_cached`]'s segments are its lines with their line breaks, and only
/// the last line (which has none) is counted here.
fn render_counted(
    turns: &[Turn],
    costs: &LineCosts,
    header_cost: usize,
    positions: &[usize],
    now: DateTime<Utc>,
) -> (String, usize) {
    let mut content = String::with_capacity(positions.len() * 120);
    let mut tokens = 0;
    let mut last_line = (0, 0);
    let mut push = |content: &mut String, line: &str, cost: usize| {
        last_line = (content.len(), cost);
        content.push_str(line);
        content.push('\n');
        tokens += cost;
    };
    push(&mut content, RECALL_HEADER, header_cost);
    let mut current: Option<Uuid> = None;
    for &position in positions {
        let turn = &turns[position];
        if current != Some(turn.conversation_id) {
            push(&mut content, &conversation_heading(turn.said_at, now), heading_cost(turn.said_at, now));
            current = Some(turn.conversation_id);
        }
        push(&mut content, &turn_line(turn), costs.of(position, turn).tokens as usize);
    }
    content.pop();
    let (start, cost) = last_line;
    let tokens = tokens - cost + count_tokens_cached(&content[start..]);
    debug_assert_eq!(tokens, count_tokens(&content), "{content}");
    (content, tokens)
}

/// `text` with runs of whitespace as one space and none at the ends; borrowed when it
/// is so already (most chat lines: this runs for every turn a request considers).
fn collapse_whitespace(text: &str) -> Cow<'_, str> {
    let mut previous_space = true;
    let tidy = text.chars().all(|c| {
        let ok = if c.is_whitespace() { c == ' ' && !previous_space } else { true };
        previous_space = c.is_whitespace();
        ok
    }) && !previous_space;
    if tidy || text.is_empty() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests;
