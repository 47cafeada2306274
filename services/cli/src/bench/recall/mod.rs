//! `npcmem bench recall --locomo FILE…`: can an NPC find what was said to it months ago,
//! when people ask in their own words? Each LoCoMo conversation (see [`locomo`]) becomes
//! one NPC (`speaker_b`) and one player (`speaker_a`); each of its sessions is published as
//! one `conversation.ended` at the session's own date and goes through the real pipeline
//! (ingest, extract with the configured extractor, relate) into a scratch world. Then every
//! question of categories 1–4 is sent to enrich as the player's message at each token
//! budget, and the returned context is searched for the evidence turns and the answer.
//! Beside it, in the same run, on the same questions, budgets and token counter: plain
//! BM25 over the pair's raw turns, standard BM25 (stemmed, stop words, the next turn after
//! each hit), the most recent turns that fit and, with an embedder configured (the
//! services get the same settings), the embedder alone ranking the raw turns.

pub mod locomo;
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

use self::locomo::{Category, Conversation};
use self::score::{Bm25, RawTurn};
use super::scratch::{self, ProcessSpec, Processes, Scratch};

#[derive(Debug, Clone, clap::Args)]
pub struct RecallBenchArgs {
    /// LoCoMo conversation files (the data set's `locomo10.json` split into one file per
    /// conversation, or files in that shape; see docs/benchmarks.md for where to get it).
    #[arg(long, num_args = 1.., required = true)]
    locomo: Vec<PathBuf>,
    /// Context budgets (`max_tokens`) to ask at.
    #[arg(long, value_delimiter = ',', default_value = "1024,2048")]
    budgets: Vec<u32>,
    /// Print enrich's context for the first N questions (at the first budget), to see
    /// what the NPC is given.
    #[arg(long, default_value_t = 0)]
    show: usize,
    /// Directory holding the service binaries (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The embedder extract and enrich run with (and the embedder-alone baseline uses).
    #[command(flatten)]
    embed: EmbedArgs,
}

const SYSTEMS: [&str; 5] = [
    "npcmem enrich",
    "plain BM25 over raw turns",
    "standard BM25 (+ next turn)",
    "most recent turns",
    "embedder alone",
];
/// The sections enrich may return, in prompt order.
const SECTIONS: [&str; 6] = ["relationship", "working_memory", "memory", "recall", "knowledge", "mood"];

/// One LoCoMo conversation as the bench plays it: the NPC and player ids it got.
struct Pair {
    conversation: Conversation,
    npc_id: Uuid,
    player_id: Uuid,
}

pub async fn run(common: &CommonConfig, args: RecallBenchArgs) -> anyhow::Result<()> {
    let bin_dir = scratch::bin_dir(args.bin_dir.as_ref())?;
    let binaries = ["npcmem-ingest", "npcmem-extract", "npcmem-relate", "npcmem-enrich"];
    scratch::require_binaries(&bin_dir, &binaries)?;
    let mut pairs = Vec::with_capacity(args.locomo.len());
    for path in &args.locomo {
        let conversation = locomo::read(path)?;
        let name = format!("locomo/{}/{}", pairs.len(), conversation.name);
        let npc_id = Uuid::new_v5(&Uuid::NAMESPACE_URL, format!("{name}/npc").as_bytes());
        let player_id = Uuid::new_v5(&Uuid::NAMESPACE_URL, format!("{name}/player").as_bytes());
        pairs.push(Pair { conversation, npc_id, player_id });
    }
    args.embed.validate()?;
    let embedder = args.embed.embedder()?;
    for pair in &pairs {
        let conversation = &pair.conversation;
        let counts: Vec<String> = Category::ALL
            .iter()
            .map(|&category| {
                let count = conversation.questions.iter().filter(|q| q.category == category).count();
                format!("{} {count}", category.name())
            })
            .collect();
        println!(
            "{}: {} (NPC) and {} (player), {} sessions, {} turns, questions: {} ({} of category 5 left out){}",
            conversation.name,
            conversation.speaker_b,
            conversation.speaker_a,
            conversation.sessions.len(),
            conversation.turn_count(),
            counts.join(", "),
            conversation.skipped_questions,
            if conversation.unknown_evidence.is_empty() {
                String::new()
            } else {
                format!("; evidence naming no turn, left out: {}", conversation.unknown_evidence.join(", "))
            }
        );
    }
    let nats = async_nats::connect(common.nats_servers())
        .await
        .with_context(|| format!("cannot reach NATS at {}", common.nats_url))?;
    let js = jetstream::new(nats.clone());
    let id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let scratch = Scratch::create(common, &js, &format!("{id}r")).await?;
    let outcome = measure(&nats, &js, &scratch, &bin_dir, common, &args, &pairs, embedder.as_ref()).await;
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
    pairs: &[Pair],
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
        let published = publish(js, scratch, pairs).await?;
        settle(&scratch.pool, published, embedder.map(Embedder::model)).await?;
        println!(
            "published {published} conversations through ingest, extract and relate in {:.1} s{}",
            started.elapsed().as_secs_f64(),
            embedder.map(|e| format!(", every turn embedded with {}", e.model())).unwrap_or_default()
        );
        evaluate(nats, scratch, args, pairs, embedder).await
    }
    .await;
    processes.stop().await;
    outcome
}

/// Publishes every session as `conversation.ended` at its date (a session over ingest's
/// limits split in order); returns how many conversations.
async fn publish(js: &jetstream::Context, scratch: &Scratch, pairs: &[Pair]) -> anyhow::Result<usize> {
    const MAX_TURNS: usize = 200;
    const MAX_CHARS: usize = 4_000;
    const MAX_BYTES: usize = 60_000;
    // The data set gives each session one time: its turns are spread a few seconds apart.
    const SECONDS_PER_TURN: i64 = 20;
    let subject = scratch.topology.subject("conversation.ended");
    let mut documents: Vec<(Uuid, Vec<u8>)> = Vec::new();
    for pair in pairs {
        let conversation = &pair.conversation;
        for session in &conversation.sessions {
            let messages: Vec<serde_json::Value> = session
                .turns
                .iter()
                .map(|turn| {
                    let text: String = turn.text.chars().take(MAX_CHARS).collect();
                    let speaker = if turn.speaker == conversation.speaker_a { "player" } else { "npc" };
                    json!({"speaker": speaker, "text": text})
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
            let mut started_at = session.at;
            for (part, chunk) in chunks.into_iter().enumerate() {
                let conversation_id = Uuid::new_v5(&pair.npc_id, format!("{}/{part}", session.number).as_bytes());
                let ended_at = started_at + chrono::TimeDelta::seconds(SECONDS_PER_TURN * chunk.len() as i64);
                let document = json!({
                    "schema_version": 1, "conversation_id": conversation_id,
                    "npc_id": pair.npc_id, "player_id": pair.player_id,
                    "npc": {"name": conversation.speaker_b, "role": "a friend", "factions": []},
                    "player": {"name": conversation.speaker_a, "factions": []},
                    "location": "town",
                    "started_at": started_at.to_rfc3339(), "ended_at": ended_at.to_rfc3339(),
                    "messages": chunk,
                });
                documents.push((conversation_id, serde_json::to_vec(&document)?));
                started_at = ended_at;
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

/// What one system scored on one budget and category.
#[derive(Default, Clone)]
struct Tally {
    /// Questions with evidence, and those whose every evidence turn was in the context.
    with_evidence: usize,
    evidence: usize,
    /// Questions whose answer has content words, and those whose answer was in the context.
    with_answer: usize,
    answer: usize,
    tokens: usize,
    asked: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.with_evidence += other.with_evidence;
        self.evidence += other.evidence;
        self.with_answer += other.with_answer;
        self.answer += other.answer;
        self.tokens += other.tokens;
        self.asked += other.asked;
    }
}

/// (system, budget, category).
type TallyKey = (usize, u32, Category);

/// A pair's raw turns as the ledger holds them (after redaction) and, with an embedder,
/// the vectors extract stored.
struct PairTurns {
    raw: Vec<RawTurn>,
    vectors: Option<TurnVectors>,
}

async fn pair_turns(scratch: &Scratch, pair: &Pair, embedder: Option<&Embedder>) -> anyhow::Result<PairTurns> {
    let rows: Vec<(Uuid, serde_json::Value)> = sqlx::query_as(
        "SELECT conversation_id, transcript FROM conversations WHERE npc_id = $1 AND player_id = $2 \
         ORDER BY ended_at, conversation_id",
    )
    .bind(pair.npc_id)
    .bind(pair.player_id)
    .fetch_all(&scratch.pool)
    .await?;
    let mut raw = Vec::new();
    let mut ledger_positions: Vec<(Uuid, usize)> = Vec::new();
    for (index, (id, transcript)) in rows.iter().enumerate() {
        for (turn, message) in transcript.as_array().into_iter().flatten().enumerate() {
            let speaker = if message["speaker"] == "player" {
                &pair.conversation.speaker_a
            } else {
                &pair.conversation.speaker_b
            };
            let text = message["text"].as_str().unwrap_or_default();
            raw.push(RawTurn { line: format!("{speaker}: {text}"), conversation: index });
            ledger_positions.push((*id, turn));
        }
    }
    // Every turn published was recorded: the baselines see the same turns as enrich.
    if raw.len() != pair.conversation.turn_count() {
        bail!(
            "{}: the ledger holds {} turns, the file {}",
            pair.conversation.name,
            raw.len(),
            pair.conversation.turn_count()
        );
    }
    let vectors = match embedder {
        Some(embedder) => {
            let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
            let stored =
                npcmem_store::recall::conversation_vectors(&mut *scratch.pool.acquire().await?, embedder.model(), &ids)
                    .await?;
            let dims = stored.values().map(|(dims, _)| *dims).max().unwrap_or(0);
            let mut pair_vectors = TurnVectors::new(dims);
            for (id, turn) in &ledger_positions {
                let vector = stored.get(id).and_then(|(dims, values)| values.get(turn * dims..(turn + 1) * dims));
                pair_vectors.push(vector);
            }
            Some(pair_vectors)
        }
        None => None,
    };
    Ok(PairTurns { raw, vectors })
}

async fn evaluate(
    nats: &async_nats::Client,
    scratch: &Scratch,
    args: &RecallBenchArgs,
    pairs: &[Pair],
    embedder: Option<&Embedder>,
) -> anyhow::Result<()> {
    let subject = scratch.topology.enrich_request();
    let mut turns = Vec::with_capacity(pairs.len());
    for pair in pairs {
        turns.push(pair_turns(scratch, pair, embedder).await?);
    }
    let plain: Vec<Bm25> = turns.iter().map(|t| Bm25::build(&t.raw, score::plain_words)).collect();
    let standard: Vec<Bm25> = turns.iter().map(|t| Bm25::build(&t.raw, score::standard_terms)).collect();
    let question_vectors = match embedder {
        Some(embedder) => Some(embed_questions(embedder, args, pairs, &turns).await?),
        None => None,
    };
    // One request per pair first: the timed requests meet a warm cache, as a game's
    // second line of dialogue does.
    for pair in pairs {
        let request =
            json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "message": "hello", "max_tokens": 256});
        nats.request(subject.clone(), serde_json::to_vec(&request)?.into()).await?;
    }

    let mut tallies: BTreeMap<TallyKey, Tally> = BTreeMap::new();
    let mut section_tokens: BTreeMap<(u32, &str), usize> = BTreeMap::new();
    let mut latencies: BTreeMap<u32, hdrhistogram::Histogram<u64>> = BTreeMap::new();
    let mut degraded = 0;
    for &budget in &args.budgets {
        let histogram = latencies.entry(budget).or_insert(hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3)?);
        let mut question_index = 0;
        for (pair_index, pair) in pairs.iter().enumerate() {
            let pair_turns = &turns[pair_index];
            for question in &pair.conversation.questions {
                let request = json!({"npc_id": pair.npc_id, "player_id": pair.player_id,
                                     "message": question.question, "max_tokens": budget});
                let started = Instant::now();
                let reply = nats.request(subject.clone(), serde_json::to_vec(&request)?.into()).await?;
                histogram.record((started.elapsed().as_micros() as u64).max(1))?;
                let reply: serde_json::Value = serde_json::from_slice(&reply.payload)?;
                if reply.get("error").is_some() {
                    bail!("enrich answered an error: {reply}");
                }
                degraded += usize::from(reply["degraded"].as_array().is_some_and(|d| !d.is_empty()));
                for section in reply["sections"].as_array().into_iter().flatten() {
                    let provider = section["provider"].as_str().unwrap_or_default();
                    if let Some(name) = SECTIONS.iter().find(|name| **name == provider) {
                        *section_tokens.entry((budget, name)).or_default() +=
                            section["token_count"].as_u64().unwrap_or(0) as usize;
                    }
                }
                let enriched = reply["placeholders"]["memory_context"].as_str().unwrap_or_default().to_owned();
                if question_index < args.show && budget == args.budgets[0] {
                    println!("--- {} (answer: {})\n{enriched}\n", question.question, question.answer);
                }
                let raw = &pair_turns.raw;
                let budget_tokens = budget as usize;
                let standard_order = score::with_next_turns(raw, &standard[pair_index].rank(&question.question));
                let mut contexts = vec![
                    enriched,
                    score::pack_lines(raw, plain[pair_index].rank(&question.question), budget_tokens),
                    score::pack_lines(raw, standard_order, budget_tokens),
                    score::pack_lines(raw, (0..raw.len()).rev(), budget_tokens),
                ];
                if let (Some(questions), Some(vectors)) = (&question_vectors, &pair_turns.vectors) {
                    let ranked = npcmem_core::recall::dense_ranking(&questions[question_index], vectors, vectors.len());
                    contexts.push(score::pack_lines(raw, ranked, budget_tokens));
                }
                question_index += 1;
                for (system, context) in contexts.iter().enumerate() {
                    let words = score::content_words(context);
                    let tally = tallies.entry((system, budget, question.category)).or_default();
                    tally.asked += 1;
                    tally.tokens += npcmem_core::tokens::count_tokens(context);
                    if !question.evidence.is_empty() {
                        tally.with_evidence += 1;
                        let all = question
                            .evidence
                            .iter()
                            .all(|&at| score::evidence_found(&pair.conversation.turn(at).text, &words));
                        tally.evidence += usize::from(all);
                    }
                    if let Some(found) = score::answer_found(&question.answer, &words) {
                        tally.with_answer += 1;
                        tally.answer += usize::from(found);
                    }
                }
            }
        }
    }
    let systems = if embedder.is_some() { SYSTEMS.len() } else { SYSTEMS.len() - 1 };
    print_tables(&tallies, &section_tokens, &args.budgets, &SYSTEMS[..systems], embedder.map(Embedder::model))?;
    for (budget, histogram) in &latencies {
        println!(
            "enrich round trip at {budget} tokens over {} requests: p50 {:.2} ms, p99 {:.2} ms",
            histogram.len(),
            histogram.value_at_quantile(0.5) as f64 / 1000.0,
            histogram.value_at_quantile(0.99) as f64 / 1000.0
        );
    }
    println!("replies with a provider left out (degraded): {degraded}");
    Ok(())
}

/// Every question's vector (in the order the questions are asked); also times the
/// embedder on a sample of raw turns and on the questions, and prints both rates.
async fn embed_questions(
    embedder: &Embedder,
    args: &RecallBenchArgs,
    pairs: &[Pair],
    turns: &[PairTurns],
) -> anyhow::Result<Vec<Vec<f32>>> {
    const SAMPLE: usize = 2048;
    let batch = embedder.call_size(args.embed.embed_batch);
    // Evenly across the corpus, so its mix of short and long turns.
    let all: Vec<&RawTurn> = turns.iter().flat_map(|pair| &pair.raw).collect();
    let sample: Vec<String> =
        all.iter().step_by((all.len() / SAMPLE).max(1)).take(SAMPLE).map(|turn| turn.line.clone()).collect();
    let started = Instant::now();
    for chunk in sample.chunks(batch) {
        embedder.embed(chunk).await?;
    }
    let turns_seconds = started.elapsed().as_secs_f64();
    let questions: Vec<String> =
        pairs.iter().flat_map(|pair| &pair.conversation.questions).map(|q| q.question.clone()).collect();
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

fn print_tables(
    tallies: &BTreeMap<TallyKey, Tally>,
    section_tokens: &BTreeMap<(u32, &str), usize>,
    budgets: &[u32],
    systems: &[&str],
    model: Option<&str>,
) -> anyhow::Result<()> {
    let mut headers = vec!["budget", "system", "evidence recall"];
    headers.extend(Category::ALL.iter().map(|category| category.name()));
    headers.extend(["answer recall", "temporal answers", "tokens used"]);
    let mut table = crate::table::Table::new(&headers);
    let percent = |hits: usize, of: usize| {
        if of == 0 { "-".to_owned() } else { format!("{:.1} % ({hits}/{of})", 100.0 * hits as f64 / of as f64) }
    };
    let sum = |filter: &dyn Fn(&TallyKey) -> bool| {
        let mut total = Tally::default();
        for (_, tally) in tallies.iter().filter(|(key, _)| filter(key)) {
            total.add(tally);
        }
        total
    };
    for &budget in budgets {
        for (system, name) in systems.iter().enumerate() {
            let all = sum(&|k| k.0 == system && k.1 == budget);
            let mut row = vec![budget.to_string(), (*name).to_owned(), percent(all.evidence, all.with_evidence)];
            for category in Category::ALL {
                let of_kind = sum(&|k| k.0 == system && k.1 == budget && k.2 == category);
                row.push(format!("{:.1} %", 100.0 * of_kind.evidence as f64 / of_kind.with_evidence.max(1) as f64));
            }
            let temporal = sum(&|k| k.0 == system && k.1 == budget && k.2 == Category::Temporal);
            row.push(percent(all.answer, all.with_answer));
            row.push(percent(temporal.answer, temporal.with_answer));
            row.push(format!("{:.0}", all.tokens as f64 / all.asked.max(1) as f64));
            table.row(row);
        }
    }
    println!();
    println!("evidence recall: questions each of whose evidence turns has at least half its content words in the");
    println!("context; answer recall: questions whose answer's content words are all in it (LoCoMo, Maharana et al.,");
    println!("ACL 2024). Tokens used: mean per question (cl100k_base).");
    if let Some(model) = model {
        println!("(npcmem enrich and the embedder alone use {model})");
    }
    table.write(&mut std::io::stdout())?;

    let mut headers = vec!["budget"];
    headers.extend(SECTIONS);
    let mut sections = crate::table::Table::new(&headers);
    for &budget in budgets {
        let asked = sum(&|k| k.0 == 0 && k.1 == budget).asked.max(1);
        let mut row = vec![budget.to_string()];
        for name in SECTIONS {
            let tokens = section_tokens.get(&(budget, name)).copied().unwrap_or(0);
            row.push(format!("{:.0}", tokens as f64 / asked as f64));
        }
        sections.row(row);
    }
    println!();
    println!("npcmem enrich: mean tokens per question by section");
    sections.write(&mut std::io::stdout())?;
    Ok(())
}
