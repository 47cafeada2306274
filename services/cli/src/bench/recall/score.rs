//! What the recall benchmark counts, and the baselines it counts beside npcmem, each
//! packed into the same token budget by the same tokenizer:
//! - plain BM25 over the pair's raw turns (words as written);
//! - standard BM25: Snowball-stemmed words without the NLTK English stop words, the
//!   turn after each hit shown with it (the strongest cheap baseline);
//! - the most recent turns that fit.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use npcmem_core::tokens::{count_tokens, count_tokens_cached};

static STOP_WORDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| stop_words::lookup("en").unwrap_or_default().iter().copied().collect());

/// The words the scoring compares: lower-cased `[a-z0-9]+` runs of three characters or
/// more, without English stop words.
pub fn content_words(text: &str) -> HashSet<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|word| word.len() >= 3 && !STOP_WORDS.contains(word))
        .map(str::to_owned)
        .collect()
}

/// An evidence turn is in a context when at least half of its content words are (a turn
/// without content words always is).
pub fn evidence_found(turn: &str, context_words: &HashSet<String>) -> bool {
    let words = content_words(turn);
    2 * words.iter().filter(|word| context_words.contains(*word)).count() >= words.len()
}

/// The answer is in a context when all of its content words are; None when it has none
/// (such an answer is not counted).
pub fn answer_found(answer: &str, context_words: &HashSet<String>) -> Option<bool> {
    let words = content_words(answer);
    (!words.is_empty()).then(|| words.iter().all(|word| context_words.contains(word)))
}

/// One raw turn of a pair, as the baselines see it: `Speaker: text`.
pub struct RawTurn {
    pub line: String,
    /// The conversation it belongs to (for the next-turn rule).
    pub conversation: usize,
}

/// Okapi BM25 (k1 1.2, b 0.75) over analysed turns.
pub struct Bm25 {
    postings: HashMap<String, Vec<(usize, f64)>>,
    lengths: Vec<f64>,
    average: f64,
    analyse: fn(&str) -> Vec<String>,
}

/// Plain analysis: lowercase words as written.
pub fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Standard analysis: lowercase words, NLTK English stop words and single characters
/// dropped, Snowball English stems.
pub fn standard_terms(text: &str) -> Vec<String> {
    static STEMMER: LazyLock<rust_stemmers::Stemmer> =
        LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().nth(1).is_some())
        .map(str::to_lowercase)
        .filter(|word| !STOP_WORDS.contains(word.as_str()))
        .map(|word| STEMMER.stem(&word).into_owned())
        .collect()
}

impl Bm25 {
    pub fn build(turns: &[RawTurn], analyse: fn(&str) -> Vec<String>) -> Self {
        let mut postings: HashMap<String, Vec<(usize, f64)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(turns.len());
        for (position, turn) in turns.iter().enumerate() {
            let mut counts: HashMap<String, f64> = HashMap::new();
            for word in analyse(&turn.line) {
                *counts.entry(word).or_insert(0.0) += 1.0;
            }
            lengths.push(counts.values().sum::<f64>().max(1.0));
            for (word, count) in counts {
                postings.entry(word).or_default().push((position, count));
            }
        }
        let average = if lengths.is_empty() { 1.0 } else { lengths.iter().sum::<f64>() / lengths.len() as f64 };
        Self { postings, lengths, average, analyse }
    }

    /// Turns sharing a term with `query`, best first (ties: the later turn first).
    pub fn rank(&self, query: &str) -> Vec<usize> {
        let (k1, b) = (1.2, 0.75);
        let n = self.lengths.len() as f64;
        let mut scores: HashMap<usize, f64> = HashMap::new();
        for word in (self.analyse)(query).into_iter().collect::<HashSet<_>>() {
            let Some(postings) = self.postings.get(&word) else { continue };
            let idf = ((n - postings.len() as f64 + 0.5) / (postings.len() as f64 + 0.5) + 1.0).ln();
            for &(position, tf) in postings {
                let length = self.lengths[position];
                *scores.entry(position).or_insert(0.0) +=
                    idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / self.average));
            }
        }
        let mut ranked: Vec<(usize, f64)> = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked.into_iter().map(|(position, _)| position).collect()
    }
}

/// `ranked` with the turn after each hit (in the same conversation) right behind it.
pub fn with_next_turns(turns: &[RawTurn], ranked: &[usize]) -> Vec<usize> {
    let mut seen = HashSet::new();
    let mut order = Vec::with_capacity(ranked.len() * 2);
    for &position in ranked {
        let next = position + 1;
        let follows = turns.get(next).is_some_and(|turn| turn.conversation == turns[position].conversation);
        for candidate in std::iter::once(position).chain(follows.then_some(next)) {
            if seen.insert(candidate) {
                order.push(candidate);
            }
        }
    }
    order
}

/// The lines of `order` that fit `budget` tokens in all, joined by line breaks.
pub fn pack_lines(turns: &[RawTurn], order: impl IntoIterator<Item = usize>, budget: usize) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut used = 0;
    for position in order {
        let cost = count_tokens_cached(&turns[position].line) + 1;
        if used + cost > budget {
            continue;
        }
        used += cost;
        kept.push(&turns[position].line);
    }
    let mut text = kept.join("\n");
    while count_tokens(&text) > budget && !kept.is_empty() {
        kept.pop();
        text = kept.join("\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(lines: &[&str]) -> Vec<RawTurn> {
        lines.iter().enumerate().map(|(i, line)| RawTurn { line: (*line).to_owned(), conversation: i / 2 }).collect()
    }

    #[test]
    fn evidence_counts_when_half_its_content_words_are_there() {
        let context = content_words("- Sam: I adopted a PUPPY named Biscuit");
        assert!(evidence_found("I adopted a puppy named Biscuit.", &context));
        assert!(evidence_found("A beagle named Biscuit", &context), "2 of 3: beagle, named, biscuit");
        assert!(!evidence_found("A beagle from the shelter downtown", &context));
        assert!(evidence_found("Oh, it is so!", &context), "no content words");
    }

    #[test]
    fn an_answer_needs_all_its_content_words_and_one_without_any_is_not_counted() {
        let context = content_words("3 weeks ago, on 8 May 2023:\n- Sam: We moved from Sweden");
        assert_eq!(answer_found("8 May 2023", &context), Some(true));
        assert_eq!(answer_found("The week before 9 June 2023", &context), Some(false));
        assert_eq!(answer_found("Sweden", &context), Some(true));
        assert_eq!(answer_found("3", &context), None);
    }

    #[test]
    fn plain_bm25_matches_words_as_written_and_standard_bm25_their_stems() {
        let turns =
            raw(&["Sam: I painted the fence", "Brom: We went fishing", "Sam: painting is fun", "Brom: The end"]);
        let plain = Bm25::build(&turns, plain_words);
        assert_eq!(plain.rank("painted"), vec![0]);
        let standard = Bm25::build(&turns, standard_terms);
        assert_eq!(standard.rank("painted").len(), 2);
        assert_eq!(standard.rank("the"), Vec::<usize>::new(), "a stop word matches nothing");
    }

    #[test]
    fn the_next_turn_follows_each_hit_within_its_conversation_once() {
        let turns = raw(&["a", "b", "c", "d", "e"]);
        assert_eq!(with_next_turns(&turns, &[2, 0, 1]), vec![2, 3, 0, 1]);
        assert_eq!(with_next_turns(&turns, &[1, 4]), vec![1, 4], "no next turn across conversations or past the end");
        let packed = pack_lines(&turns, [0, 1, 2], 100);
        assert_eq!(packed, "a\nb\nc");
        assert!(count_tokens(&pack_lines(&turns, [0, 1, 2], 2)) <= 2);
    }
}
