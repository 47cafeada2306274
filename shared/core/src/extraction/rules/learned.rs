//! The learned reader: one logistic regression per kind over the stemmed words of a
//! sentence, its speaker and the lines around it. The patterns know the forms they were
//! written for; the reader, trained on the labelled game conversations and on real
//! everyday chat (every line of which is a negative), finds the same events told in
//! other words. `npcmem train-extractor` trains it; the weights ship in the binary.
//!
//! Deterministic: training visits examples in a fixed pseudo-random order, and the
//! weights are stored quantised, so a model file is reproduced exactly from its data.

use std::collections::HashMap;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

use super::text::Sentence;
use super::{Kind, NEGATIONS, Scene};
use crate::wire::Speaker;

/// Every kind the reader scores: events, then facts, in the model file's column order.
const K: usize = Kind::EVENTS.len() + Kind::FACTS.len();

fn kinds() -> impl Iterator<Item = Kind> {
    Kind::EVENTS.into_iter().chain(Kind::FACTS)
}

/// Features are hashed into 2^20 buckets: collisions are rare at this vocabulary.
const BUCKET_BITS: u32 = 20;
const MAGIC: &[u8; 8] = b"NPCMLR01";
/// The model trained from `data/extraction` (see `npcmem train-extractor`).
const SHIPPED: &[u8] = include_bytes!("../../../../../data/extraction/reader.bin");

/// How training runs; the defaults are what the shipped model was trained with.
#[derive(Debug, Clone, Copy)]
pub struct TrainConfig {
    pub epochs: usize,
    pub learning_rate: f32,
    pub l2: f32,
    /// Positives are rare; each counts this many times a negative.
    pub positive_weight: f32,
    /// A feature seen in fewer training sentences than this gets no weight.
    pub min_count: u32,
    /// A sentence scoring at least this is evidence of its kind.
    pub threshold: f32,
    /// Features whose every weight is smaller than this are dropped from the model: they
    /// barely move a score, and most of them are words seen only in everyday chat.
    pub prune: f32,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 12,
            learning_rate: 0.1,
            l2: 1e-5,
            positive_weight: 4.0,
            min_count: 2,
            threshold: 0.4,
            prune: 0.1,
        }
    }
}

/// One training sentence: its features and the kinds it is evidence of.
#[derive(Debug, Clone)]
pub struct Example {
    pub features: Vec<u32>,
    pub kinds: Vec<Kind>,
    /// Kinds this sentence teaches nothing about: its conversation holds that kind, told
    /// in another sentence, and this one may tell it too.
    pub unsure: Vec<Kind>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reader {
    bias: [f32; K],
    thresholds: [f32; K],
    weights: Weights,
}

/// The best-scoring sentence of one kind in a scene.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    pub kind: Kind,
    pub sentence: usize,
    pub probability: f32,
}

fn column(kind: Kind) -> usize {
    kinds().position(|k| k == kind).expect("every kind has a column")
}

fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// FNV-1a over the parts of a feature's name: stable across builds and platforms,
/// unlike the standard library's hasher, and with no string built per feature.
fn bucket(parts: &[&str]) -> u32 {
    mask(parts.iter().fold(FNV_START, |hash, part| fnv(hash, part)))
}

const FNV_START: u32 = 0x811c_9dc5;

fn fnv(mut hash: u32, part: &str) -> u32 {
    for byte in part.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

fn mask(hash: u32) -> u32 {
    hash & ((1 << BUCKET_BITS) - 1)
}

/// A word's stem and the features it makes, per side (player, NPC), worked out once per
/// thread: the same few thousand words make up most chat.
struct Word {
    stem: Box<str>,
    unigram: [u32; 2],
    same_message: [u32; 2],
    before: u32,
    after: u32,
    /// The hash of "<side>b:<stem> ", which the next word's stem completes to a pair.
    pair_head: [u32; 2],
}

impl Word {
    fn new(word: &str) -> Word {
        let stem = stemmer().stem(word).into_owned();
        let per_side = |parts: &dyn Fn(&'static str) -> u32| [parts("p"), parts("n")];
        Word {
            unigram: per_side(&|side| bucket(&[side, "u:", &stem])),
            same_message: per_side(&|side| bucket(&[side, "m:", &stem])),
            before: bucket(&["before:", &stem]),
            after: bucket(&["after:", &stem]),
            pair_head: per_side(&|side| [side, "b:", stem.as_str(), " "].iter().fold(FNV_START, |h, p| fnv(h, p))),
            stem: stem.into_boxed_str(),
        }
    }
}

/// Calls `each` with the worked-out form of every word of `sentence`, in order.
fn with_words(sentence: &Sentence<'_>, mut each: impl FnMut(&Word)) {
    thread_local! {
        static WORDS: std::cell::RefCell<HashMap<String, Word>> = std::cell::RefCell::new(HashMap::new());
    }
    WORDS.with_borrow_mut(|words| {
        if words.len() >= 100_000 {
            words.clear();
        }
        for word in sentence.words() {
            if !words.contains_key(word) {
                words.insert(word.to_string(), Word::new(word));
            }
            each(&words[word]);
        }
    });
}

/// Feature ids are already hashes: the map uses them as they are.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // The table keys on the top bits as well: spread the id over all 64.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8) | u64::from(*byte);
        }
    }
    fn write_u32(&mut self, value: u32) {
        self.0 = u64::from(value);
    }
}

type Weights = HashMap<u32, [f32; K], std::hash::BuildHasherDefault<IdHasher>>;

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Where a sentence of the context stands relative to the one being read.
#[derive(Debug, Clone, Copy)]
enum Place {
    SameMessage,
    Before,
    After,
}

/// Each sentence's own features, and its words as seen from the lines around it, hashed
/// once per scene.
pub(crate) struct SceneFeatures {
    own: Vec<Vec<u32>>,
    as_before: Vec<Vec<u32>>,
    as_after: Vec<Vec<u32>>,
    as_same_message: Vec<Vec<u32>>,
    speakers: Vec<(Speaker, usize)>,
}

impl SceneFeatures {
    pub(crate) fn new(scene: &Scene<'_>) -> Self {
        let mut features = SceneFeatures {
            own: Vec::with_capacity(scene.sentences.len()),
            as_before: Vec::with_capacity(scene.sentences.len()),
            as_after: Vec::with_capacity(scene.sentences.len()),
            as_same_message: Vec::with_capacity(scene.sentences.len()),
            speakers: scene.sentences.iter().map(|s| (s.speaker, s.message)).collect(),
        };
        for sentence in &scene.sentences {
            let (side, at) = if sentence.by(Speaker::Player) { ("p", 0) } else { ("n", 1) };
            let mut own = Vec::with_capacity(16);
            let (mut before, mut after, mut same_message) = (Vec::new(), Vec::new(), Vec::new());
            own.push(bucket(&[side, ":bias"]));
            let mut pair_head = [side, "b:", "^", " "].iter().fold(FNV_START, |h, p| fnv(h, p));
            let mut negation = false;
            with_words(sentence, |word| {
                own.push(word.unigram[at]);
                own.push(mask(fnv(pair_head, &word.stem)));
                pair_head = word.pair_head[at];
                before.push(word.before);
                after.push(word.after);
                same_message.push(word.same_message[at]);
            });
            for word in sentence.words() {
                negation |= NEGATIONS.contains(&word);
            }
            if sentence.plain.ends_with('?') {
                own.push(bucket(&[side, ":question"]));
            }
            if negation {
                own.push(bucket(&[side, ":negation"]));
            }
            if sentence.reported {
                own.push(bucket(&[side, ":reported"]));
            }
            let set = |mut features: Vec<u32>| {
                features.sort_unstable();
                features.dedup();
                features
            };
            features.own.push(set(own));
            features.as_before.push(set(before));
            features.as_after.push(set(after));
            features.as_same_message.push(set(same_message));
        }
        features
    }

    /// The feature sets that describe the sentence at `index`: its words and word pairs
    /// by its speaker (and whether it asks, denies or reports), the words of each other
    /// sentence of its message, and of each sentence of the other side's two messages
    /// before and after it (an accusation before an admission, thanks after a deed).
    fn groups(&self, index: usize) -> impl Iterator<Item = &[u32]> {
        let context = self.context(index).map(|(other, place)| match place {
            Place::SameMessage => self.as_same_message[other].as_slice(),
            Place::Before => self.as_before[other].as_slice(),
            Place::After => self.as_after[other].as_slice(),
        });
        std::iter::once(self.own[index].as_slice()).chain(context)
    }

    /// The sentences around the one at `index` whose words describe it, and where they stand.
    fn context(&self, index: usize) -> impl Iterator<Item = (usize, Place)> + '_ {
        let (speaker, message) = self.speakers[index];
        self.speakers.iter().enumerate().filter_map(move |(other, &(other_speaker, other_message))| {
            let place = if other == index {
                return None;
            } else if other_speaker == speaker {
                (other_message == message).then_some(Place::SameMessage)?
            } else if other_message < message && other_message + 2 >= message {
                Place::Before
            } else if other_message > message && other_message <= message + 2 {
                Place::After
            } else {
                return None;
            };
            Some((other, place))
        })
    }

    /// The sentence's features, as training sees them: a word in two of the sentences
    /// around it counts twice.
    pub(crate) fn of(&self, index: usize) -> Vec<u32> {
        self.groups(index).flatten().copied().collect()
    }
}

impl Reader {
    /// The model that ships with this build.
    pub fn shipped() -> &'static Reader {
        static SHIPPED_READER: OnceLock<Reader> = OnceLock::new();
        SHIPPED_READER.get_or_init(|| Reader::from_bytes(SHIPPED).expect("the shipped reader model is well formed"))
    }

    /// From now on a sentence is evidence of `kind` where it scores at least `threshold`.
    pub fn set_threshold(&mut self, kind: Kind, threshold: f32) {
        self.thresholds[column(kind)] = threshold;
    }

    /// A reader that finds nothing: the patterns alone.
    pub fn none() -> Reader {
        Reader { bias: [f32::NEG_INFINITY; K], thresholds: [1.0; K], weights: Weights::default() }
    }

    fn sum(&self, features: &[u32]) -> [f32; K] {
        let mut z = [0.0; K];
        for feature in features {
            if let Some(weights) = self.weights.get(feature) {
                for (sum, weight) in z.iter_mut().zip(weights) {
                    *sum += weight;
                }
            }
        }
        z
    }

    /// Per kind, the sentence that reads most like it, where it reads so at least as
    /// surely as the kind's threshold.
    pub(crate) fn read(&self, scene: &Scene<'_>) -> Vec<Reading> {
        let mut best: [Option<Reading>; K] = [None; K];
        let kind_at: Vec<Kind> = kinds().collect();
        let features = SceneFeatures::new(scene);
        // Each feature set's weights are summed once, then added wherever the set appears.
        let sums = |sets: &[Vec<u32>]| sets.iter().map(|set| self.sum(set)).collect::<Vec<_>>();
        let (own, before, after, same) =
            (sums(&features.own), sums(&features.as_before), sums(&features.as_after), sums(&features.as_same_message));
        for (index, own) in own.iter().enumerate() {
            let mut z = self.bias;
            let mut add = |part: &[f32; K]| z.iter_mut().zip(part).for_each(|(sum, weight)| *sum += weight);
            add(own);
            for (other, place) in features.context(index) {
                add(match place {
                    Place::SameMessage => &same[other],
                    Place::Before => &before[other],
                    Place::After => &after[other],
                });
            }
            let probabilities = z.map(sigmoid);
            for (column, probability) in probabilities.into_iter().enumerate() {
                let better = best[column].is_none_or(|reading| probability > reading.probability);
                if probability >= self.thresholds[column] && better {
                    best[column] = Some(Reading { kind: kind_at[column], sentence: index, probability });
                }
            }
        }
        best.into_iter().flatten().collect()
    }

    /// Stochastic gradient descent on the logistic loss, one model per kind, visiting the
    /// examples in an order fixed by a seeded generator.
    pub fn train(examples: &[Example], config: TrainConfig) -> Reader {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for example in examples {
            for feature in &example.features {
                *counts.entry(*feature).or_default() += 1;
            }
        }
        let kept: Vec<Vec<u32>> = examples
            .iter()
            .map(|example| {
                example.features.iter().copied().filter(|f| counts[f] >= config.min_count).collect::<Vec<u32>>()
            })
            .collect();
        let columns = |kinds: &[Kind]| {
            let mut set = [false; K];
            for kind in kinds {
                set[column(*kind)] = true;
            }
            set
        };
        let unsure: Vec<[bool; K]> = examples.iter().map(|example| columns(&example.unsure)).collect();
        let labels: Vec<[bool; K]> = examples.iter().map(|example| columns(&example.kinds)).collect();
        let mut weights = Weights::default();
        let mut bias = [0.0f32; K];
        let mut order: Vec<usize> = (0..examples.len()).collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for epoch in 0..config.epochs {
            // Fisher–Yates with xorshift: the same order on every machine.
            for i in (1..order.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let rate = config.learning_rate / (1.0 + epoch as f32 * 0.5);
            for &at in &order {
                let features = &kept[at];
                let mut z = bias;
                for feature in features {
                    if let Some(w) = weights.get(feature) {
                        for (sum, weight) in z.iter_mut().zip(w) {
                            *sum += weight;
                        }
                    }
                }
                let mut gradient = [0.0f32; K];
                for column in 0..K {
                    if unsure[at][column] {
                        continue;
                    }
                    let target = if labels[at][column] { 1.0 } else { 0.0 };
                    let weight = if labels[at][column] { config.positive_weight } else { 1.0 };
                    gradient[column] = (sigmoid(z[column]) - target) * weight;
                    bias[column] -= rate * gradient[column];
                }
                for feature in features {
                    let w = weights.entry(*feature).or_insert([0.0; K]);
                    for column in 0..K {
                        w[column] -= rate * (gradient[column] + config.l2 * w[column]);
                    }
                }
            }
        }
        weights.retain(|_, w| w.iter().any(|w| w.abs() >= config.prune));
        let reader = Reader { bias, thresholds: [config.threshold; K], weights };
        // What is stored is what runs: round through the file format.
        Reader::from_bytes(&reader.to_bytes()).expect("a model round-trips")
    }

    /// Weights are stored as i16 in steps of 1/1024, dropping those that round to zero.
    pub fn to_bytes(&self) -> Vec<u8> {
        const STEP: f32 = 1024.0;
        let quantise = |w: f32| (w * STEP).round().clamp(f32::from(i16::MIN), f32::from(i16::MAX)) as i16;
        let mut entries: Vec<(u32, [i16; K])> = self
            .weights
            .iter()
            .map(|(feature, weights)| (*feature, weights.map(quantise)))
            .filter(|(_, weights)| weights.iter().any(|w| *w != 0))
            .collect();
        entries.sort_unstable_by_key(|(feature, _)| *feature);
        let mut out = Vec::with_capacity(16 + K * 8 + entries.len() * (4 + 2 * K));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(K as u32).to_le_bytes());
        for value in self.bias.iter().chain(&self.thresholds) {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (feature, weights) in entries {
            out.extend_from_slice(&feature.to_le_bytes());
            for weight in weights {
                out.extend_from_slice(&weight.to_le_bytes());
            }
        }
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Reader> {
        let mut rest = bytes.strip_prefix(MAGIC.as_slice())?;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        let u32_at = |bytes: &[u8]| u32::from_le_bytes(bytes.try_into().expect("four bytes"));
        if u32_at(take(4)?) as usize != K {
            return None;
        }
        let mut floats = [0.0f32; 2 * K];
        for value in &mut floats {
            *value = f32::from_le_bytes(take(4)?.try_into().ok()?);
        }
        let count = u32_at(take(4)?) as usize;
        let mut weights = Weights::with_capacity_and_hasher(count, Default::default());
        for _ in 0..count {
            let feature = u32_at(take(4)?);
            let mut row = [0.0f32; K];
            for weight in &mut row {
                *weight = f32::from(i16::from_le_bytes(take(2)?.try_into().ok()?)) / 1024.0;
            }
            weights.insert(feature, row);
        }
        if !rest.is_empty() {
            return None;
        }
        let bias = floats[..K].try_into().ok()?;
        let thresholds = floats[K..].try_into().ok()?;
        Some(Reader { bias, thresholds, weights })
    }
}

/// The training sentences of one labelled conversation: each sentence that overlaps a
/// labelled evidence span is a positive of that kind; the conversation's other sentences
/// are unsure of its labelled kinds and negatives of every other.
pub fn examples(conversation: &crate::wire::ConversationEnded, labels: &[(Kind, String)]) -> Vec<Example> {
    let scene = super::scene(conversation);
    let features = SceneFeatures::new(&scene);
    (0..scene.sentences.len())
        .map(|index| {
            let sentence = &scene.sentences[index];
            let message = &conversation.messages[sentence.message].text;
            let start = sentence.text.as_ptr() as usize - message.as_ptr() as usize;
            let end = start + sentence.text.len();
            let kinds: Vec<Kind> = labels
                .iter()
                .filter(|(_, evidence)| {
                    message.match_indices(evidence.as_str()).any(|(at, found)| at < end && start < at + found.len())
                })
                .map(|(kind, _)| *kind)
                .collect();
            // Labels name one sentence as the evidence, but the sentences around it often
            // tell the same event: they are no negatives of it.
            let unsure = labels.iter().map(|(kind, _)| *kind).filter(|kind| !kinds.contains(kind)).collect();
            Example { features: features.of(index), kinds, unsure }
        })
        .collect()
}
