//! `npcmem bench recall`: can an NPC find what was said to it, long ago? Real human chats
//! between the same two people over several days (see [`corpus`]) go through the real
//! pipeline (ingest, extract with the rules extractor, relate) into a scratch world; then
//! enrich is asked each probe question at each token budget, and the context it returns
//! is searched for the turn that holds the answer. Beside it, in the same run, on the same
//! questions and budgets: plain BM25 over the pair's raw turns, the most recent turns
//! that fit and, with an embedder configured (the services get the same settings), the
//! embedder alone ranking the raw turns by similarity to the question.

pub mod corpus;
mod score;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use async_nats::jetstream;
use futures::StreamExt;
use npcmem_bus::StreamKind;
use npcmem_core::recall::TurnVectors;
use npcmem_llm::Embedder;
use npcmem_service::CommonConfig;
use npcmem_service::embed::EmbedArgs;
use serde_json::json;
use uuid::Uuid;

use self::corpus::{Benchmark, ProbeKind, Selection};
use self::score::{PlainBm25, RawTurn};
use super::scratch::{self, ProcessSpec, Processes, Scratch};

/// Where `deploy/local/fetch-corpus` puts the corpus.
pub const DEFAULT_CORPUS: &str = ".local/corpora/chitchat-dataset-0.9.0/dataset.json";

#[derive(Debug, Clone, clap::Args)]
pub struct RecallBenchArgs {
    /// The Chit-Chat corpus (`dataset.json` of the `chitchat-dataset` package on PyPI);
    /// `deploy/local/fetch-corpus` downloads it here.
    #[arg(long, default_value = DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Pairs of people (NPC and player) taken from the corpus, those with the most chats first.
    #[arg(long, default_value_t = 40)]
    pairs: usize,
    /// Only pairs with at least this many chats.
    #[arg(long, default_value_t = 4)]
    min_sessions: usize,
    /// Only chats with at least this many turns.
    #[arg(long, default_value_t = 8)]
    min_turns: usize,
    /// Probe questions per pair.
    #[arg(long, default_value_t = 16)]
    probes_per_pair: usize,
    /// Context budgets (`max_tokens`) to ask at.
    #[arg(long, value_delimiter = ',', default_value = "1024,2048")]
    budgets: Vec<u32>,
    /// Directory holding the service binaries (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The embedder extract and enrich run with (and the embedder-alone baseline uses).
    #[command(flatten)]
    embed: EmbedArgs,
}

const SYSTEMS: [&str; 4] = ["npcmem enrich", "BM25 over raw turns", "most recent turns", "embedder alone"];
const NPC_NAME: &str = "Brom";
const PLAYER_NAME: &str = "Sam";

pub async fn run(common: &CommonConfig, args: RecallBenchArgs) -> anyhow::Result<()> {
    let bin_dir = scratch::bin_dir(args.bin_dir.as_ref())?;
    let binaries = ["npcmem-ingest", "npcmem-extract", "npcmem-relate", "npcmem-enrich"];
    scratch::require_binaries(&bin_dir, &binaries)?;
    let corpus = std::fs::read(&args.corpus).with_context(|| {
        format!("cannot read the corpus at {} (fetch it with deploy/local/fetch-corpus)", args.corpus.display())
    })?;
    let selection = Selection {
        pairs: args.pairs,
        min_sessions: args.min_sessions,
        min_turns: args.min_turns,
        probes_per_pair: args.probes_per_pair,
    };
    args.embed.validate()?;
    let embedder = args.embed.embedder()?;
    let benchmark = corpus::build(&corpus, &selection, chrono::Utc::now())?;
    if benchmark.probes.is_empty() {
        bail!("the selection gave no probes; lower --min-sessions or --min-turns");
    }
    let sessions: usize = benchmark.pairs.iter().map(|p| p.sessions.len()).sum();
    let turns: usize = benchmark.pairs.iter().flat_map(|p| &p.sessions).map(|s| s.turns.len()).sum();
    println!(
        "corpus: {} pairs, {sessions} chats, {turns} turns ({:.0} per pair), {} probes",
        benchmark.pairs.len(),
        turns as f64 / benchmark.pairs.len().max(1) as f64,
        benchmark.probes.len()
    );
    let nats = async_nats::connect(common.nats_servers())
        .await
        .with_context(|| format!("cannot reach NATS at {}", common.nats_url))?;
    let js = jetstream::new(nats.clone());
    let id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let scratch = Scratch::create(common, &js, &format!("{id}r")).await?;
    let outcome = measure(&nats, &js, &scratch, &bin_dir, common, &args, &benchmark, embedder.as_ref()).await;
    scratch.remove(&js).await;
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    nats: &async_nats::Client,
    js: &jetstream::Context,
    scratch: &Scratch,
    bin_dir: &Path,
    common: &CommonConfig,
    args: &RecallBenchArgs,
    benchmark: &Benchmark,
    embedder: Option<&Embedder>,
) -> anyhow::Result<()> {
    let mut embed_env = args.embed.to_env();
    // Every batch embedded by extract, however far behind: the bench measures them all.
    embed_env.retain(|(name, _)| *name != "NPCMEM_EMBED_QUEUE_BATCHES");
    embed_env.push(("NPCMEM_EMBED_QUEUE_BATCHES", "100000".to_owned()));
    let specs = [
        ProcessSpec { binary: "npcmem-ingest", env: Vec::new(), pulls: Some((StreamKind::Conversations, "ingest")) },
        ProcessSpec { binary: "npcmem-extract", env: embed_env.clone(), pulls: Some((StreamKind::Jobs, "extract")) },
        ProcessSpec { binary: "npcmem-relate", env: Vec::new(), pulls: Some((StreamKind::Events, "relate")) },
        ProcessSpec { binary: "npcmem-enrich", env: embed_env, pulls: None },
    ];
    let processes = Processes::start(js, bin_dir, common, scratch, &specs).await?;
    let outcome = async {
        let started = Instant::now();
        let published = publish(js, scratch, benchmark).await?;
        settle(&scratch.pool, published, embedder.map(Embedder::model)).await?;
        if let Some(embedder) = embedder {
            println!(
                "extract embedded every turn with {} within {:.0} s of the first publish",
                embedder.model(),
                started.elapsed().as_secs_f64()
            );
        }
        let bytes_per_turn: Option<f64> = sqlx::query_scalar(
            "SELECT sum(pg_column_size(transcript))::float8 / nullif(sum(message_count), 0) FROM conversations",
        )
        .fetch_one(&scratch.pool)
        .await?;
        println!(
            "published {published} conversations through ingest, extract (rules) and relate; ledger transcripts: \
             {:.0} bytes per turn",
            bytes_per_turn.unwrap_or(0.0)
        );
        evaluate(nats, scratch, args, benchmark, embedder).await
    }
    .await;
    processes.stop().await;
    outcome
}

/// Publishes every chat as `conversation.ended` (chats over the limits split in order);
/// returns how many conversations.
async fn publish(js: &jetstream::Context, scratch: &Scratch, benchmark: &Benchmark) -> anyhow::Result<usize> {
    const MAX_TURNS: usize = 200;
    const MAX_CHARS: usize = 4_000;
    const MAX_BYTES: usize = 60_000;
    let subject = scratch.topology.subject("conversation.ended");
    let mut documents: Vec<(Uuid, Vec<u8>)> = Vec::new();
    for pair in &benchmark.pairs {
        for (session_index, session) in pair.sessions.iter().enumerate() {
            let messages: Vec<serde_json::Value> = session
                .turns
                .iter()
                .map(|(is_player, text)| {
                    let text: String = text.chars().take(MAX_CHARS).collect();
                    json!({"speaker": if *is_player { "player" } else { "npc" }, "text": text})
                })
                .collect();
            let mut chunks: Vec<Vec<serde_json::Value>> = vec![Vec::new()];
            let mut bytes = 0;
            for message in messages {
                let size = message.to_string().len();
                let full = chunks.last().is_some_and(|c| c.len() >= MAX_TURNS || bytes + size > MAX_BYTES);
                if full {
                    chunks.push(Vec::new());
                    bytes = 0;
                }
                bytes += size;
                chunks.last_mut().expect("one chunk at least").push(message);
            }
            let span = session.ended_at - session.started_at;
            let parts = chunks.len() as i32;
            for (part, chunk) in chunks.into_iter().enumerate() {
                let name = format!("{}/{session_index}/{part}", pair.player_id);
                let conversation_id = Uuid::new_v5(&pair.npc_id, name.as_bytes());
                let started_at = session.started_at + span * part as i32 / parts;
                let ended_at = session.started_at + span * (part as i32 + 1) / parts;
                let document = json!({
                    "schema_version": 1, "conversation_id": conversation_id,
                    "npc_id": pair.npc_id, "player_id": pair.player_id,
                    "npc": {"name": NPC_NAME, "role": "innkeeper", "factions": []},
                    "player": {"name": PLAYER_NAME, "factions": []},
                    "location": "The Gilded Goose",
                    "started_at": started_at.to_rfc3339(), "ended_at": ended_at.to_rfc3339(),
                    "messages": chunk,
                });
                documents.push((conversation_id, serde_json::to_vec(&document)?));
            }
        }
    }
    let count = documents.len();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(documents)
        .map(|(id, payload)| {
            let subject = subject.clone();
            async move {
                npcmem_bus::publish::publish_with_id(js, &subject, &id.to_string(), None, payload.into()).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    Ok(count)
}

/// Waits until every conversation is extracted, applied to its relationship and, with
/// `model`, embedded.
async fn settle(pool: &sqlx::PgPool, published: usize, model: Option<&str>) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let (recorded, open, applied): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM conversations),
                    (SELECT count(*) FROM conversations WHERE state IN ('pending', 'extracting', 'storing')),
                    (SELECT count(*) FROM applied_conversations)",
        )
        .fetch_one(pool)
        .await?;
        let unembedded = match model {
            Some(model) => npcmem_store::recall::count_unembedded(&mut *pool.acquire().await?, model).await?,
            None => 0,
        };
        let done = recorded as usize == published && open == 0 && applied >= recorded && unembedded == 0;
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after 1800 s: {recorded}/{published} recorded, {open} not extracted, {applied} applied, \
                 {unembedded} not embedded"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Hits per (system, budget, split, kind).
/// (system index, budget, held out, probe kind).
type TallyKey = (usize, u32, bool, ProbeKind);

#[derive(Default)]
struct Tally {
    asked: usize,
    all_words: usize,
    verbatim: usize,
    tokens: usize,
}

async fn evaluate(
    nats: &async_nats::Client,
    scratch: &Scratch,
    args: &RecallBenchArgs,
    benchmark: &Benchmark,
    embedder: Option<&Embedder>,
) -> anyhow::Result<()> {
    let subject = scratch.topology.enrich_request();
    // The baselines see exactly the turns the ledger holds (after redaction) and, for the
    // embedder alone, the vectors extract stored for them.
    let mut raw: BTreeMap<usize, Vec<RawTurn>> = BTreeMap::new();
    let mut vectors: BTreeMap<usize, TurnVectors> = BTreeMap::new();
    for (index, pair) in benchmark.pairs.iter().enumerate() {
        let rows: Vec<(Uuid, serde_json::Value)> = sqlx::query_as(
            "SELECT conversation_id, transcript FROM conversations WHERE npc_id = $1 AND player_id = $2 \
             ORDER BY ended_at, conversation_id",
        )
        .bind(pair.npc_id)
        .bind(pair.player_id)
        .fetch_all(&scratch.pool)
        .await?;
        let positions: Vec<(Uuid, usize)> = rows
            .iter()
            .flat_map(|(id, transcript)| (0..transcript.as_array().map_or(0, Vec::len)).map(|turn| (*id, turn)))
            .collect();
        let turns = rows
            .iter()
            .flat_map(|(_, transcript)| transcript.as_array().cloned().unwrap_or_default())
            .map(|message| {
                let speaker = if message["speaker"] == "player" { PLAYER_NAME } else { NPC_NAME };
                RawTurn { line: format!("{speaker}: {}", message["text"].as_str().unwrap_or_default()) }
            })
            .collect();
        raw.insert(index, turns);
        if let Some(embedder) = embedder {
            let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
            let stored =
                npcmem_store::recall::conversation_vectors(&mut *scratch.pool.acquire().await?, embedder.model(), &ids)
                    .await?;
            let dims = stored.values().map(|(dims, _)| *dims).max().unwrap_or(0);
            let mut pair_vectors = TurnVectors::new(dims);
            for (id, turn) in positions {
                let vector = stored.get(&id).and_then(|(dims, values)| values.get(turn * dims..(turn + 1) * dims));
                pair_vectors.push(vector);
            }
            vectors.insert(index, pair_vectors);
        }
    }
    let indexes: BTreeMap<usize, PlainBm25> =
        raw.iter().map(|(pair, turns)| (*pair, PlainBm25::build(turns))).collect();
    let question_vectors = match embedder {
        Some(embedder) => Some(embed_questions(embedder, args, benchmark, &raw).await?),
        None => None,
    };

    let mut tallies: BTreeMap<TallyKey, Tally> = BTreeMap::new();
    let mut latencies = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut degraded = 0;
    for &budget in &args.budgets {
        for (probe_index, probe) in benchmark.probes.iter().enumerate() {
            let pair = &benchmark.pairs[probe.pair];
            let request = json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "message": probe.question,
                                 "max_tokens": budget});
            let started = Instant::now();
            let reply = nats.request(subject.clone(), serde_json::to_vec(&request)?.into()).await?;
            latencies.record((started.elapsed().as_micros() as u64).max(1))?;
            let reply: serde_json::Value = serde_json::from_slice(&reply.payload)?;
            if reply.get("error").is_some() {
                bail!("enrich answered an error: {reply}");
            }
            degraded += usize::from(reply["degraded"].as_array().is_some_and(|d| !d.is_empty()));
            let enriched = reply["placeholders"]["memory_context"].as_str().unwrap_or_default().to_owned();
            let turns = &raw[&probe.pair];
            let bm25 = score::pack_lines(turns, indexes[&probe.pair].rank(&probe.question), budget as usize);
            let recent = score::pack_lines(turns, (0..turns.len()).rev(), budget as usize);
            let mut contexts = vec![enriched, bm25, recent];
            if let Some(questions) = &question_vectors {
                let ranked = npcmem_core::recall::dense_ranking(
                    &questions[probe_index],
                    &vectors[&probe.pair],
                    vectors[&probe.pair].len(),
                );
                contexts.push(score::pack_lines(turns, ranked, budget as usize));
            }
            for (system, context) in contexts.iter().enumerate() {
                let found = score::found(&probe.evidence, context);
                let tally = tallies.entry((system, budget, pair.held_out, probe.kind)).or_default();
                tally.asked += 1;
                tally.all_words += usize::from(found.all_words);
                tally.verbatim += usize::from(found.verbatim);
                tally.tokens += npcmem_core::tokens::count_tokens(context);
            }
        }
    }
    let systems = if embedder.is_some() { SYSTEMS.len() } else { SYSTEMS.len() - 1 };
    print_table(&tallies, &args.budgets, &SYSTEMS[..systems], embedder.map(Embedder::model))?;
    println!(
        "enrich round trip over {} requests ({degraded} with a provider left out): p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        latencies.value_at_quantile(0.5) as f64 / 1000.0,
        latencies.value_at_quantile(0.99) as f64 / 1000.0
    );
    Ok(())
}

/// Every probe question's vector (by probe index); also times the embedder on a sample
/// of raw turns and on the questions, and prints both rates.
async fn embed_questions(
    embedder: &Embedder,
    args: &RecallBenchArgs,
    benchmark: &Benchmark,
    raw: &BTreeMap<usize, Vec<RawTurn>>,
) -> anyhow::Result<Vec<Vec<f32>>> {
    const SAMPLE: usize = 2048;
    let batch = embedder.call_size(args.embed.embed_batch);
    // Evenly across the corpus, so its mix of short and long turns.
    let all: Vec<&RawTurn> = raw.values().flatten().collect();
    let sample: Vec<String> =
        all.iter().step_by((all.len() / SAMPLE).max(1)).take(SAMPLE).map(|turn| turn.line.clone()).collect();
    let started = Instant::now();
    for chunk in sample.chunks(batch) {
        embedder.embed(chunk).await?;
    }
    let turns_seconds = started.elapsed().as_secs_f64();
    let questions: Vec<String> = benchmark.probes.iter().map(|probe| probe.question.clone()).collect();
    let started = Instant::now();
    let mut vectors = Vec::with_capacity(questions.len());
    for chunk in questions.chunks(batch) {
        vectors.extend(embedder.embed(chunk).await?);
    }
    let questions_seconds = started.elapsed().as_secs_f64();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "embedder {}: {} turns in {turns_seconds:.1} s ({:.0} per second), {} questions in {questions_seconds:.1} s \
         ({:.0} per second), batches of {batch}, {threads} cores",
        embedder.model(),
        sample.len(),
        sample.len() as f64 / turns_seconds.max(1e-9),
        questions.len(),
        questions.len() as f64 / questions_seconds.max(1e-9),
    );
    Ok(vectors)
}

fn print_table(
    tallies: &BTreeMap<TallyKey, Tally>,
    budgets: &[u32],
    systems: &[&str],
    model: Option<&str>,
) -> anyhow::Result<()> {
    let kinds = [ProbeKind::Keywords, ProbeKind::WordForms, ProbeKind::SingleWord, ProbeKind::Reply];
    let mut table = crate::table::Table::new(&[
        "budget",
        "system",
        "held-out",
        "tuning half",
        "keywords",
        "word_forms",
        "single_word",
        "reply",
        "verbatim (held-out)",
        "tokens used",
    ]);
    let sum = |filter: &dyn Fn(&TallyKey) -> bool| {
        let mut total = Tally::default();
        for (_, tally) in tallies.iter().filter(|(key, _)| filter(key)) {
            total.asked += tally.asked;
            total.all_words += tally.all_words;
            total.verbatim += tally.verbatim;
            total.tokens += tally.tokens;
        }
        total
    };
    let percent = |hits: usize, asked: usize| {
        if asked == 0 {
            "-".to_owned()
        } else {
            format!("{:.1} % ({hits}/{asked})", 100.0 * hits as f64 / asked as f64)
        }
    };
    for &budget in budgets {
        for (system, name) in systems.iter().enumerate() {
            let held = sum(&|k| k.0 == system && k.1 == budget && k.2);
            let tuning = sum(&|k| k.0 == system && k.1 == budget && !k.2);
            let all = sum(&|k| k.0 == system && k.1 == budget);
            let mut row = vec![
                budget.to_string(),
                (*name).to_owned(),
                percent(held.all_words, held.asked),
                percent(tuning.all_words, tuning.asked),
            ];
            for kind in kinds {
                let of_kind = sum(&|k| k.0 == system && k.1 == budget && k.2 && k.3 == kind);
                row.push(percent(of_kind.all_words, of_kind.asked));
            }
            row.push(percent(held.verbatim, held.asked));
            row.push(format!("{:.0}", all.tokens as f64 / all.asked.max(1) as f64));
            table.row(row);
        }
    }
    println!();
    println!("evidence recall: questions whose evidence turn's content words all appear in the context");
    println!("(per-kind columns: held-out half; tokens used: mean over all questions)");
    if let Some(model) = model {
        println!("(npcmem enrich and the embedder alone use {model})");
    }
    table.write(&mut std::io::stdout())?;
    Ok(())
}
