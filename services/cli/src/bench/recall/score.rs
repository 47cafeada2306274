//! What the recall benchmark counts, and the baselines it counts beside npcmem: plain BM25
//! over the pair's raw turns, and the most recent turns, each packed into the same token
//! budget by the same tokenizer.

use std::collections::{HashMap, HashSet};

use npcmem_core::tokens::{count_tokens, count_tokens_cached};

use super::corpus::content_words;

/// Whether a context holds the evidence turn: every one of its content words appears in
/// the context (the headline), and whether the turn appears verbatim (a stricter check,
/// case and spacing aside).
pub struct Found {
    pub all_words: bool,
    pub verbatim: bool,
}

pub fn found(evidence: &str, context: &str) -> Found {
    let context_words: HashSet<String> = content_words(context).into_iter().collect();
    let words: HashSet<String> = content_words(evidence).into_iter().collect();
    let all_words = !words.is_empty() && words.iter().all(|word| context_words.contains(word));
    let verbatim = normalised(context).contains(&normalised(evidence));
    Found { all_words, verbatim }
}

fn normalised(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One raw turn of a pair, as the baselines see it.
pub struct RawTurn {
    pub line: String,
}

/// Plain BM25 (k1 1.2, b 0.75) over lowercase words as written: no stemming, no stop
/// words — the "raw turns" baseline.
pub struct PlainBm25 {
    postings: HashMap<String, Vec<(usize, f64)>>,
    lengths: Vec<f64>,
    average: f64,
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

impl PlainBm25 {
    pub fn build(turns: &[RawTurn]) -> Self {
        let mut postings: HashMap<String, Vec<(usize, f64)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(turns.len());
        for (position, turn) in turns.iter().enumerate() {
            let mut counts: HashMap<String, f64> = HashMap::new();
            for word in words(&turn.line) {
                *counts.entry(word).or_insert(0.0) += 1.0;
            }
            lengths.push(counts.values().sum::<f64>().max(1.0));
            for (word, count) in counts {
                postings.entry(word).or_default().push((position, count));
            }
        }
        let average = if lengths.is_empty() { 1.0 } else { lengths.iter().sum::<f64>() / lengths.len() as f64 };
        Self { postings, lengths, average }
    }

    pub fn rank(&self, query: &str) -> Vec<usize> {
        let (k1, b) = (1.2, 0.75);
        let n = self.lengths.len() as f64;
        let mut scores: HashMap<usize, f64> = HashMap::new();
        for word in words(query).into_iter().collect::<HashSet<_>>() {
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

    #[test]
    fn evidence_counts_when_all_its_content_words_are_there() {
        let context = "- they said: \"I adopted a PUPPY named Biscuit\"";
        let hit = found("I adopted a puppy named Biscuit.", context);
        assert!(hit.all_words && hit.verbatim);
        let partial = found("A beagle named Biscuit", context);
        assert!(!partial.all_words && !partial.verbatim);
    }

    #[test]
    fn plain_bm25_matches_words_as_written_only() {
        let turns: Vec<RawTurn> = ["I painted the fence", "We went fishing", "painting is fun"]
            .iter()
            .map(|line| RawTurn { line: (*line).to_owned() })
            .collect();
        let bm25 = PlainBm25::build(&turns);
        assert_eq!(bm25.rank("painted"), vec![0]);
        assert_eq!(bm25.rank("fishing trip"), vec![1]);
        let packed = pack_lines(&turns, bm25.rank("painted fishing"), 100);
        assert_eq!(packed.lines().count(), 2);
        assert!(count_tokens(&pack_lines(&turns, [0, 1, 2], 5)) <= 5);
    }
}
