//! `npcmem train-extractor`: trains the rules extractor's learned reader on the labelled
//! tuning conversations (each sentence overlapping a labelled evidence span is a positive
//! of its kind) and on real everyday chats past the bench's measured slice (every sentence
//! a negative), and writes the model the build ships. `--check` retrains and fails when
//! the committed model differs, so the model always follows from the data.
//!
//! `--cross-validate` chooses each kind's threshold: every tuning batch is scored by a
//! model trained without it, and a validation slice of everyday chats (past the training
//! slice) by the model trained on everything; the thresholds are written beside the model
//! and every later training reads them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use npcmem_core::extraction::rules::learned::{self, Example, Reader, TrainConfig};
use npcmem_core::extraction::rules::{Kind, RulesExtractor};
use npcmem_core::wire::ConversationEnded;

use crate::extraction_set::{self, LabelledConversation, Score};

#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// The labelled set; only its `tuning/` part is trained on.
    #[arg(long, default_value = "data/extraction")]
    data: PathBuf,
    /// The Chit-Chat corpus (`deploy/local/fetch-corpus`).
    #[arg(long, default_value = extraction_set::DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Everyday chats are taken from this number on: the first 500 are what
    /// `npcmem bench extract` measures, and must stay unseen.
    #[arg(long, default_value_t = 1000)]
    everyday_skip: usize,
    /// Everyday chats to train on, every sentence of them a negative.
    #[arg(long, default_value_t = 1500)]
    everyday: usize,
    /// Leave out tuning conversations whose id starts with one of these (to score the
    /// model on conversations it has not seen).
    #[arg(long)]
    exclude: Vec<String>,
    /// Where the model is written.
    #[arg(long, default_value = "data/extraction/reader.bin")]
    out: PathBuf,
    /// Each kind's threshold (JSON, kind to threshold), as `--cross-validate` wrote it;
    /// a kind it does not name gets `--threshold`. By default `thresholds.json` in --data.
    #[arg(long)]
    thresholds: Option<PathBuf>,
    /// Write nothing; fail if the model at --out is not what training gives.
    #[arg(long)]
    check: bool,
    /// Choose each kind's threshold by cross-validation over the tuning batches and write
    /// them to --thresholds (the model is not written: train again after).
    #[arg(long)]
    cross_validate: bool,
    /// With --cross-validate: print each tuning conversation whose events the fold's model
    /// gets wrong at the chosen thresholds, with the sentences it misread, and the events
    /// the reader adds to the validation chats at 0.5.
    #[arg(long)]
    show: bool,
    /// Thresholds are chosen for the best F-beta out of fold: below 1 weighs precision
    /// above recall (a false memory misleads; a missed one is only forgotten).
    #[arg(long, default_value_t = 0.5)]
    beta: f64,
    /// The most false events per 1,000 validation chats the reader may add, all kinds
    /// together (what the patterns alone keep is not counted). At 1, threats, gifts and
    /// insults get no reader at all: each adds one false event even at 0.95.
    #[arg(long, default_value_t = 2.0)]
    false_per_1000: f64,
    /// A sentence scoring at least this is evidence of its kind.
    #[arg(long, default_value_t = TrainConfig::default().threshold)]
    threshold: f32,
    /// Passes over the training sentences.
    #[arg(long, default_value_t = TrainConfig::default().epochs)]
    epochs: usize,
    /// How many negatives a positive sentence counts as.
    #[arg(long, default_value_t = TrainConfig::default().positive_weight)]
    positive_weight: f32,
    /// Features whose every weight is below this are left out of the model.
    #[arg(long, default_value_t = TrainConfig::default().prune)]
    prune: f32,
    /// The L2 penalty on every weight, per step.
    #[arg(long, default_value_t = TrainConfig::default().l2)]
    l2: f32,
    /// A feature seen in fewer training sentences than this gets no weight.
    #[arg(long, default_value_t = TrainConfig::default().min_count)]
    min_count: u32,
    #[arg(long, default_value_t = TrainConfig::default().learning_rate)]
    learning_rate: f32,
}

/// The thresholds cross-validation tries for each kind; the last one no score reaches,
/// for a kind where the reader adds only false events.
const GRID: [f32; 17] = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, OFF];
const OFF: f32 = 1.5;

/// The everyday chats thresholds are checked on: neither the bench's measured 500 nor the
/// default training slice (1,000–2,500); the corpus ends before 5,000.
const VALIDATION: [(usize, usize); 2] = [(500, 500), (2500, 5000)];

pub fn run(args: TrainArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let tuning = extraction_set::load_part(&args.data.join("tuning"))?;
    let thresholds = args.thresholds.clone().unwrap_or_else(|| args.data.join("thresholds.json"));
    let everyday: Vec<ConversationEnded> = extraction_set::everyday(&args.corpus, args.everyday_skip, args.everyday)?
        .iter()
        .map(extraction_set::redacted)
        .collect();
    let everyday_examples: Vec<Example> = everyday.iter().flat_map(|c| learned::examples(c, &[])).collect();
    let config = TrainConfig {
        threshold: args.threshold,
        prune: args.prune,
        epochs: args.epochs,
        positive_weight: args.positive_weight,
        l2: args.l2,
        min_count: args.min_count,
        learning_rate: args.learning_rate,
    };
    let excluded = |l: &LabelledConversation| args.exclude.iter().any(|prefix| l.id.starts_with(prefix.as_str()));
    let kept: Vec<Prepared<'_>> = tuning.iter().filter(|l| !excluded(l)).map(Prepared::new).collect();
    if args.cross_validate {
        return cross_validate(&args, &thresholds, &kept, &everyday_examples, config, out);
    }
    let mut reader = train(kept.iter(), &everyday_examples, config);
    let examples: Vec<&Example> = kept.iter().flat_map(|p| &p.examples).collect();
    for (kind, threshold) in read_thresholds(&thresholds)? {
        reader.set_threshold(kind, threshold);
    }
    let bytes = reader.to_bytes();
    let positives = examples.iter().filter(|e| !e.kinds.is_empty()).count();
    writeln!(
        out,
        "trained on {} labelled conversations and {} everyday chats: {} sentences, {positives} of them evidence; \
         model {} bytes",
        kept.len(),
        everyday.len(),
        examples.len() + everyday_examples.len(),
        bytes.len()
    )?;
    for kind in Kind::EVENTS.into_iter().chain(Kind::FACTS) {
        let count = examples.iter().filter(|e| e.kinds.contains(&kind)).count();
        write!(out, "{} {count}  ", kind.as_str())?;
    }
    writeln!(out)?;
    if args.check {
        let committed = std::fs::read(&args.out).with_context(|| format!("cannot read {}", args.out.display()))?;
        if committed != bytes {
            bail!(
                "{} is not the model its data trains (retrain with `npcmem train-extractor` and commit it)",
                args.out.display()
            );
        }
        writeln!(out, "{} is the model its data trains", args.out.display())?;
    } else {
        std::fs::write(&args.out, &bytes).with_context(|| format!("cannot write {}", args.out.display()))?;
        writeln!(out, "wrote {}", args.out.display())?;
    }
    Ok(())
}

/// A labelled conversation as extract sees it (redacted) and its training sentences,
/// worked out once however many folds train on it.
struct Prepared<'a> {
    labelled: &'a LabelledConversation,
    redacted: ConversationEnded,
    examples: Vec<Example>,
}

impl<'a> Prepared<'a> {
    fn new(labelled: &'a LabelledConversation) -> Self {
        let redacted = extraction_set::redacted(&labelled.conversation);
        let examples = learned::examples(&redacted, &labelled.labels);
        Prepared { labelled, redacted, examples }
    }

    fn batch(&self) -> &str {
        batch(&self.labelled.id)
    }
}

/// The reader trained on `labelled` and the everyday negatives.
fn train<'p, 'a: 'p>(
    labelled: impl Iterator<Item = &'p Prepared<'a>>,
    everyday: &[Example],
    config: TrainConfig,
) -> Reader {
    let all: Vec<Example> = labelled.flat_map(|p| p.examples.iter()).chain(everyday).cloned().collect();
    Reader::train(&all, config)
}

/// How many of `conversations` yield a memory of each kind.
fn kinds_counted(rules: &RulesExtractor, conversations: &[ConversationEnded]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for conversation in conversations {
        for kind in extraction_set::kinds_kept(rules, conversation) {
            *counts.entry(kind).or_default() += 1;
        }
    }
    counts
}

/// Every kind's threshold as last chosen; none where no file has been written yet.
fn read_thresholds(path: &Path) -> anyhow::Result<Vec<(Kind, f32)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    let map: BTreeMap<String, f32> =
        serde_json::from_str(&text).with_context(|| format!("{} is not a JSON object of kinds", path.display()))?;
    map.into_iter()
        .map(|(kind, threshold)| {
            let kind = Kind::parse(&kind).with_context(|| format!("{}: no kind {kind:?}", path.display()))?;
            // Above 1 no score reaches it: the reader finds nothing of that kind.
            if !(0.0..=OFF).contains(&threshold) {
                bail!("{}: the threshold of {} must be within 0..={OFF}", path.display(), kind.as_str());
            }
            Ok((kind, threshold))
        })
        .collect()
}

/// A tuning conversation's batch: its id without the number ("tuning-k").
fn batch(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(batch, _)| batch)
}

fn cross_validate(
    args: &TrainArgs,
    thresholds: &Path,
    kept: &[Prepared<'_>],
    everyday: &[Example],
    config: TrainConfig,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let mut batches: Vec<&str> = kept.iter().map(Prepared::batch).collect();
    batches.dedup();
    // Per grid threshold, per kind: the score of out-of-fold readings.
    let mut folded: Vec<BTreeMap<&'static str, Score>> = vec![BTreeMap::new(); GRID.len()];
    let mut fold_readers: Vec<(&str, Reader)> = Vec::new();
    for held in &batches {
        let reader = train(kept.iter().filter(|p| p.batch() != *held), everyday, config);
        let score_on: Vec<&Prepared<'_>> = kept.iter().filter(|p| p.batch() == *held).collect();
        for (at, threshold) in GRID.iter().enumerate() {
            let rules = RulesExtractor::with_reader(Some(at_threshold(&reader, *threshold)));
            let scores = extraction_set::score(
                score_on.iter().map(|p| (p.labelled, extraction_set::kinds_kept(&rules, &p.redacted))),
            );
            for (kind, score) in scores {
                let total = folded[at].entry(kind).or_default();
                *total = total.plus(score);
            }
        }
        writeln!(out, "fold {held}: {} conversations scored", score_on.len())?;
        if args.show {
            fold_readers.push((held, reader));
        }
    }
    let patterns = RulesExtractor::with_reader(None);
    let alone =
        extraction_set::score(kept.iter().map(|p| (p.labelled, extraction_set::kinds_kept(&patterns, &p.redacted))));
    let mut validation: Vec<ConversationEnded> = Vec::new();
    for (skip, count) in VALIDATION {
        validation.extend(extraction_set::everyday(&args.corpus, skip, count)?.iter().map(extraction_set::redacted));
    }
    let full = train(kept.iter(), everyday, config);
    // The budget is for what the reader adds: what the patterns alone keep is theirs.
    let patterns_false = kinds_counted(&patterns, &validation);
    let false_events: Vec<BTreeMap<&'static str, usize>> = GRID
        .iter()
        .map(|threshold| {
            kinds_counted(&RulesExtractor::with_reader(Some(at_threshold(&full, *threshold))), &validation)
        })
        .collect();
    // The reader may add at most this many false events to the validation chats, all
    // kinds together; what the patterns alone keep there is not counted.
    let budget = (args.false_per_1000 * validation.len() as f64 / 1000.0).floor() as usize;
    let beta2 = args.beta * args.beta;
    let f_beta = |score: &Score| match (score.precision(), score.recall()) {
        (Some(p), Some(r)) if p + r > 0.0 => (1.0 + beta2) * p * r / (beta2 * p + r),
        _ => 0.0,
    };
    let kinds = Kind::EVENTS.map(Kind::as_str);
    let added = |at: usize, kind: &str| {
        false_events[at].get(kind).copied().unwrap_or(0).saturating_sub(patterns_false.get(kind).copied().unwrap_or(0))
    };
    // Per kind, the best threshold at each count of added false events (ties to the higher
    // threshold: fewer guesses for the same result).
    let best_within = |kind: &str, most: usize| {
        (0..GRID.len())
            .filter(|at| added(*at, kind) <= most)
            .max_by(|a, b| f_beta(&folded[*a][kind]).total_cmp(&f_beta(&folded[*b][kind])).then(a.cmp(b)))
            .expect("the last threshold adds nothing")
    };
    let mut at: Vec<usize> = kinds.iter().map(|kind| best_within(kind, 0)).collect();
    // Spend the budget where one more false event buys the most F-beta.
    loop {
        let spent: usize = kinds.iter().zip(&at).map(|(kind, at)| added(*at, kind)).sum();
        let upgrade = kinds
            .iter()
            .enumerate()
            .filter_map(|(k, kind)| {
                let now = added(at[k], kind);
                let better = best_within(kind, now + budget.saturating_sub(spent));
                let cost = added(better, kind).saturating_sub(now);
                let gain = f_beta(&folded[better][kind]) - f_beta(&folded[at[k]][kind]);
                (gain > 0.0 && cost > 0).then_some((k, better, gain / cost as f64))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2));
        match upgrade {
            Some((k, better, _)) => at[k] = better,
            None => break,
        }
    }
    let mut table =
        crate::table::Table::new(&["kind", "patterns P", "patterns R", "threshold", "P", "R", "everyday false"]);
    let mut chosen: BTreeMap<&'static str, f32> = BTreeMap::new();
    let mut chosen_scores: BTreeMap<&'static str, Score> = BTreeMap::new();
    for (kind, at) in kinds.iter().zip(&at) {
        let at = *at;
        chosen.insert(kind, GRID[at]);
        let score = folded[at][*kind];
        chosen_scores.insert(kind, score);
        let base = alone.get(*kind).copied().unwrap_or_default();
        table.row(vec![
            kind.to_string(),
            percent(base.precision()),
            percent(base.recall()),
            if GRID[at] == OFF { "off".to_owned() } else { format!("{:.2}", GRID[at]) },
            percent(score.precision()),
            percent(score.recall()),
            false_events[at].get(*kind).copied().unwrap_or(0).to_string(),
        ]);
    }
    writeln!(
        out,
        "\nout of fold over {} batches ({} conversations); everyday false events on {} chats (500–1,000 and 2,500 on):",
        batches.len(),
        kept.len(),
        validation.len(),
    )?;
    table.write(out)?;
    let all = extraction_set::total(&chosen_scores, &Kind::EVENTS);
    let base = extraction_set::total(&alone, &Kind::EVENTS);
    writeln!(
        out,
        "all events: patterns alone P {} R {}; with the reader P {} R {}",
        percent(base.precision()),
        percent(base.recall()),
        percent(all.precision()),
        percent(all.recall())
    )?;
    if args.show {
        // What the reader would invent in everyday chat at 0.5, beyond what the patterns keep.
        let half = RulesExtractor::with_reader(Some(at_threshold(&full, 0.5)));
        for conversation in &validation {
            let kept_alone = extraction_set::kinds_kept(&patterns, conversation);
            for finding in half.findings(conversation) {
                if finding.kind.is_event() && !kept_alone.contains(finding.kind.as_str()) {
                    writeln!(out, "EVERYDAY {}: {}", finding.kind.as_str(), finding.evidence)?;
                }
            }
        }
        for (held, reader) in fold_readers {
            let mut reader = reader;
            for (kind, threshold) in &chosen {
                reader.set_threshold(Kind::parse(kind).expect("an event kind"), *threshold);
            }
            let rules = RulesExtractor::with_reader(Some(reader));
            for prepared in kept.iter().filter(|p| p.batch() == held) {
                let labelled = prepared.labelled;
                let found: Vec<_> =
                    rules.findings(&prepared.redacted).into_iter().filter(|f| f.kind.is_event()).collect();
                let expected: Vec<&(Kind, String)> = labelled.labels.iter().filter(|(k, _)| k.is_event()).collect();
                for (kind, evidence) in &expected {
                    if !found.iter().any(|f| f.kind == *kind) {
                        writeln!(out, "MISS {} {}: {evidence}", labelled.id, kind.as_str())?;
                    }
                }
                for finding in found.iter().filter(|f| !expected.iter().any(|(k, _)| *k == f.kind)) {
                    writeln!(out, "FALSE {} {}: {}", labelled.id, finding.kind.as_str(), finding.evidence)?;
                }
            }
        }
    }
    let json = serde_json::to_string_pretty(&chosen)? + "\n";
    std::fs::write(thresholds, json).with_context(|| format!("cannot write {}", thresholds.display()))?;
    writeln!(out, "wrote {} (train again to use them)", thresholds.display())?;
    Ok(())
}

fn at_threshold(reader: &Reader, threshold: f32) -> Reader {
    let mut reader = reader.clone();
    for kind in Kind::EVENTS.into_iter().chain(Kind::FACTS) {
        reader.set_threshold(kind, threshold);
    }
    reader
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{:.0} %", 100.0 * v))
}
