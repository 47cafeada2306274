//! `npcmem train-extractor`: trains the rules extractor's learned reader on the labelled
//! tuning conversations (each sentence overlapping a labelled evidence span is a positive
//! of its kind) and on real everyday chats past the bench's measured slice (every sentence
//! a negative), and writes the model the build ships. `--check` retrains and fails when
//! the committed model differs, so the model always follows from the data.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use npcmem_core::extraction::rules::Kind;
use npcmem_core::extraction::rules::learned::{self, Example, Reader, TrainConfig};

use crate::extraction_set;

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
    /// Write nothing; fail if the model at --out is not what training gives.
    #[arg(long)]
    check: bool,
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
}

pub fn run(args: TrainArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let tuning = extraction_set::load_part(&args.data.join("tuning"))?;
    let everyday = extraction_set::everyday(&args.corpus, args.everyday_skip, args.everyday)?;
    let mut examples: Vec<Example> = Vec::new();
    let mut conversations = 0;
    for labelled in tuning.iter().filter(|l| !args.exclude.iter().any(|prefix| l.id.starts_with(prefix.as_str()))) {
        let conversation = extraction_set::redacted(&labelled.conversation);
        examples.extend(learned::examples(&conversation, &labelled.labels));
        conversations += 1;
    }
    let positives = examples.iter().filter(|e| !e.kinds.is_empty()).count();
    for conversation in &everyday {
        examples.extend(learned::examples(&extraction_set::redacted(conversation), &[]));
    }
    let config = TrainConfig {
        threshold: args.threshold,
        prune: args.prune,
        epochs: args.epochs,
        positive_weight: args.positive_weight,
        ..TrainConfig::default()
    };
    let reader = Reader::train(&examples, config);
    let bytes = reader.to_bytes();
    writeln!(
        out,
        "trained on {conversations} labelled conversations and {} everyday chats: {} sentences, {positives} of them \
         evidence; model {} bytes",
        everyday.len(),
        examples.len(),
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
