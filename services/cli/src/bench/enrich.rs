//! `npcmem bench enrich`: request latency (p50/p99/p99.9) and requests/s of a scratch
//! npcmem-enrich over 1,000 pairs × 200 memories and 1,000 verbatim turns (or as many as
//! asked, with a smaller set talking), warm cache at several concurrency levels, then
//! rounds that each pair a measurement with its baseline of the same moment: the cold
//! cache against a direct SQL read of the same pairs' rows from this process, and a steady
//! 2,000 requests/s against an echo responder on the same NATS.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use hdrhistogram::Histogram;
use npcmem_service::CommonConfig;
use serde_json::json;
use uuid::Uuid;

use super::scratch::{self, ProcessSpec, Processes, Scratch};

#[derive(Debug, Clone, clap::Args)]
pub struct EnrichBenchArgs {
    #[arg(long, default_value_t = 1_000)]
    pairs: i64,
    #[arg(long, default_value_t = 200)]
    memories_per_pair: i64,
    /// Verbatim turns per pair in the ledger (conversations of 20 turns), for recall.
    #[arg(long, default_value_t = 1_000)]
    turns_per_pair: i64,
    /// Pairs the warm runs ask (the first N; default: all): a world whose stored pairs
    /// outnumber those talking at once, with enrich's cache bounded below the whole.
    #[arg(long)]
    active_pairs: Option<i64>,
    /// Closed-loop concurrency levels of the warm runs.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    concurrency: Vec<usize>,
    /// Seconds per measured run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Rounds of the paired measurements (cold against SQL, paced against echo); the
    /// median round is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// The steady offered rate of the paced warm run.
    #[arg(long, default_value_t = 2_000)]
    paced_rate: u64,
    /// enrich's cache bound (`NPCMEM_ENRICH_CACHE_MAX_MB`); pairs past it are evicted
    /// and reloaded, as in a world with more pairs talking than memory holds.
    #[arg(long, default_value_t = 4_096)]
    cache_max_mb: u64,
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

pub async fn run(common: &CommonConfig, args: EnrichBenchArgs) -> anyhow::Result<()> {
    let bin_dir = scratch::bin_dir(args.bin_dir.as_ref())?;
    scratch::require_binaries(&bin_dir, &["npcmem-enrich"])?;
    let nats = async_nats::connect(common.nats_servers()).await?;
    let js = jetstream::new(nats.clone());
    let id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let scratch = Scratch::create(common, &js, &format!("{id}e")).await?;
    let outcome = measure(&nats, &js, &scratch, &bin_dir, common, &args).await;
    scratch.remove(&js).await;
    outcome
}

async fn measure(
    nats: &async_nats::Client,
    js: &jetstream::Context,
    scratch: &Scratch,
    bin_dir: &std::path::Path,
    common: &CommonConfig,
    args: &EnrichBenchArgs,
) -> anyhow::Result<()> {
    let pool = &scratch.pool;
    let started = Instant::now();
    let pairs: Vec<(Uuid, Uuid)> = (0..args.pairs).map(|_| (Uuid::new_v4(), Uuid::new_v4())).collect();
    let (npcs, players): (Vec<Uuid>, Vec<Uuid>) = pairs.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                               created_at, last_accessed)
         SELECT gen_random_uuid(), p.npc_id, p.player_id, 'episodic',
                (ARRAY['The player bought a steel sword for fifty gold.', 'The player helped me fight off bandits on the mill road.',
                       'The player insulted my craftsmanship in front of customers.', 'The player brought me silverleaf from the forest.',
                       'The player asked about the haunted mine and its strange lights.'])[1 + (i % 5)] || ' (' || i || ')',
                ARRAY[(ARRAY['trade','helpful','insult','gift','quest'])[1 + (i % 5)]],
                round((0.2 + random() * 0.5)::numeric, 3)::float8, 0.9, 0.5, at, at
         FROM unnest($1::uuid[], $2::uuid[]) AS p(npc_id, player_id), generate_series(1, $3) AS i,
              LATERAL (SELECT now() - random() * interval '60 days' + (i * 0) * interval '1 s' AS at) AS t",
    )
    .bind(&npcs)
    .bind(&players)
    .bind(args.memories_per_pair)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO relationships (npc_id, player_id, trust, fear, respect, loyalty, friendliness, romantic_interest,
                                    disposition, stage, interaction_count, version)
         SELECT npc_id, player_id, 0.66, 0.0, 0.52, 0.5, 0.68, 0.0, 0.31, 'friend', 6, 6
         FROM unnest($1::uuid[], $2::uuid[]) AS p(npc_id, player_id)",
    )
    .bind(&npcs)
    .bind(&players)
    .execute(pool)
    .await?;
    // Recall's turns: conversations of 20 varied turns, a day apart, in the ledger.
    sqlx::query(
        "INSERT INTO conversations (conversation_id, npc_id, player_id, npc_name, player_name, transcript,
                                    message_count, state, started_at, ended_at)
         SELECT gen_random_uuid(), p.npc_id, p.player_id, 'Brom', 'Aria',
                (SELECT jsonb_agg(jsonb_build_object(
                     'speaker', CASE WHEN t % 2 = 0 THEN 'player' ELSE 'npc' END,
                     'text', (ARRAY['I sold', 'You mended', 'We talked about', 'My cousin lost', 'The guard found',
                                    'I dreamt of', 'You promised me', 'Someone stole'])[1 + (c * 7 + t) % 8]
                             || ' ' || (c * 20 + t) || ' ' ||
                             (ARRAY['steel swords', 'silver amulets', 'wolf pelts', 'river fish', 'old maps',
                                    'copper pots', 'red apples', 'iron nails', 'lost letters', 'oak barrels'])[1 + (c + t * 3) % 10]
                             || ' near the ' ||
                             (ARRAY['mill', 'tavern', 'north gate', 'forge', 'temple', 'docks'])[1 + (c * 3 + t) % 6]
                             || '.') ORDER BY t)
                 FROM generate_series(0, 19) AS t),
                20, 'complete', now() - (c + 1) * interval '1 day', now() - (c + 1) * interval '1 day' + interval '10 min'
         FROM unnest($1::uuid[], $2::uuid[]) AS p(npc_id, player_id), generate_series(0, $3 - 1) AS c",
    )
    .bind(&npcs)
    .bind(&players)
    .bind(args.turns_per_pair / 20)
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    println!(
        "seeded {} pairs × {} memories and {} turns in {:.1} s",
        args.pairs,
        args.memories_per_pair,
        args.turns_per_pair / 20 * 20,
        started.elapsed().as_secs_f64()
    );
    let (ledger_bytes, turns, database_bytes): (i64, i64, i64) = sqlx::query_as(
        "SELECT pg_total_relation_size('conversations'),
                (SELECT coalesce(sum(message_count), 0)::int8 FROM conversations),
                pg_database_size(current_database())",
    )
    .fetch_one(pool)
    .await?;
    println!(
        "PostgreSQL: {:.0} bytes per turn in the ledger table (rows, TOAST and indexes), {:.2} MB per pair in all \
         (memories and relationships included)",
        ledger_bytes as f64 / turns.max(1) as f64,
        database_bytes as f64 / args.pairs.max(1) as f64 / 1e6
    );
    let spec = ProcessSpec {
        binary: "npcmem-enrich",
        env: vec![
            ("NPCMEM_ENRICH_CACHE_CAPACITY", (args.pairs * 2).to_string()),
            ("NPCMEM_ENRICH_CACHE_TTL_SECS", "3600".into()),
            ("NPCMEM_ENRICH_CACHE_MAX_MB", args.cache_max_mb.to_string()),
        ],
        pulls: None,
    };
    let processes = Processes::start(js, bin_dir, common, scratch, &[spec]).await?;
    let subject = scratch.topology.enrich_request();
    let payloads: Arc<Vec<Vec<u8>>> = Arc::new(
        pairs
            .iter()
            .map(|(npc_id, player_id)| {
                serde_json::to_vec(&json!({
                    "npc_id": npc_id, "player_id": player_id, "message": "Do you still have that steel sword?",
                    "max_tokens": 1024,
                    "npc": {"name": "Brom", "role": "the blacksmith", "personality": "gruff but fair",
                            "speaking_style": "short sentences", "knowledge_domains": ["smithing"]}
                }))
                .expect("requests serialise")
            })
            .collect(),
    );
    // The pairs talking now: the warm runs ask only these, as a world where most stored
    // pairs are idle; the cold sweeps ask every pair.
    let active = args.active_pairs.map_or(payloads.len(), |active| (active as usize).clamp(1, payloads.len()));
    let talking: Arc<Vec<Vec<u8>>> = Arc::new(payloads[..active].to_vec());
    let reply_bytes = wait_for_responder(nats, &subject, &payloads[0]).await?;
    // The tokenizer is loaded and one pair cached: the service's own footprint.
    let rss_at_start = processes.pid("npcmem-enrich").and_then(super::rss::rss_kib).map(|(current, _)| current);
    let outcome = async {
        // Cold: every pair's first request after a full invalidation. One unreported sweep
        // first opens the service's database connections (a cold cache, not a cold process).
        sweep(nats, &subject, &talking, 8).await?;
        let invalidate = || async {
            nats.publish(scratch.topology.cache_invalidate(), br#"{"npc_id":null,"player_id":null}"#.to_vec().into())
                .await?;
            nats.flush().await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            anyhow::Ok(())
        };
        invalidate().await?;
        let (cold, rate) = sweep(nats, &subject, &payloads, 1).await?;
        print_run("enrich, cold cache (each pair's first request, 1 concurrent)", &cold, rate);
        // The pairs talking now, loaded: the warm runs then meet a warm cache.
        sweep(nats, &subject, &talking, 8).await?;
        for concurrency in &args.concurrency {
            let (histogram, rate) = closed_loop(nats, &subject, &talking, *concurrency, args.seconds).await?;
            print_run(&format!("enrich, warm cache, {concurrency} concurrent"), &histogram, rate);
        }
        // The targets compare enrich with baselines of the same moment: on a shared machine
        // the floor moves from minute to minute, so each round measures both, back to back,
        // and the median round is reported.
        let p99 = |histogram: &Histogram<u64>| histogram.value_at_quantile(0.99) as f64 / 1000.0;
        let (mut over_echo, mut over_sql) = (Vec::new(), Vec::new());
        for round in 1..=args.rounds {
            println!("round {round} of {}:", args.rounds);
            invalidate().await?;
            let (cold, rate) = sweep(nats, &subject, &payloads, 8).await?;
            print_run("  enrich, cold cache (each pair's first request, 8 concurrent)", &cold, rate);
            let (sql, sql_rate) = sql_baseline(pool, &pairs, 8, args.seconds).await?;
            print_run("  baseline: direct SQL read of the pair's memory rows and transcripts, 8 concurrent", &sql, sql_rate);
            // Warm again before the paced run.
            sweep(nats, &subject, &talking, 8).await?;
            let (paced_run, achieved) = paced(nats, &subject, &talking, args.paced_rate, args.seconds).await?;
            print_run(&format!("  enrich, warm cache, paced at {} requests/s", args.paced_rate), &paced_run, achieved);
            let (echo, echoed) =
                echo_baseline(nats, common, scratch, &talking, reply_bytes, args.paced_rate, args.seconds).await?;
            print_run(
                &format!("  baseline: a responder in this process answering {reply_bytes} bytes at once, same NATS, same rate"),
                &echo,
                echoed,
            );
            over_echo.push(p99(&paced_run) - p99(&echo));
            over_sql.push(p99(&cold) / p99(&sql).max(0.001));
        }
        let (echo_median, echo_low, echo_high) = median_and_range(&mut over_echo);
        let (sql_median, sql_low, sql_high) = median_and_range(&mut over_sql);
        println!(
            "enrich adds {echo_median:.2} ms at p99 over the echo responder at {} requests/s, median of {} rounds \
             (range {echo_low:.2} to {echo_high:.2}; target: at most 1 ms)",
            args.paced_rate, args.rounds
        );
        println!(
            "cold cache, 8 concurrent: p99 {sql_median:.2}× the direct SQL read's, median of {} rounds (range \
             {sql_low:.2}× to {sql_high:.2}×; target: at most 1.5×)",
            args.rounds
        );
        if let Some(start) = rss_at_start {
            println!("npcmem-enrich RSS after its first request: {:.1} MB", start as f64 / 1024.0);
        }
        if let Some((_, peak)) = processes.pid("npcmem-enrich").and_then(super::rss::rss_kib) {
            println!(
                "npcmem-enrich peak RSS: {:.1} MB ({} pairs of {} memories and {} turns, {} talking; cache bound {} MB)",
                peak as f64 / 1024.0,
                args.pairs,
                args.memories_per_pair,
                args.turns_per_pair,
                active,
                args.cache_max_mb
            );
        }
        anyhow::Ok(())
    }
    .await;
    processes.stop().await;
    outcome
}

/// Waits for enrich's first answer; returns its size in bytes.
async fn wait_for_responder(nats: &async_nats::Client, subject: &str, payload: &[u8]) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout(Duration::from_secs(2), nats.request(subject.to_owned(), payload.to_vec().into()))
            .await
        {
            Ok(Ok(reply)) => return Ok(reply.payload.len()),
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            _ => anyhow::bail!("npcmem-enrich did not answer within 60 s"),
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

async fn one(nats: &async_nats::Client, subject: &str, payload: &[u8]) -> anyhow::Result<u64> {
    let started = Instant::now();
    let reply = nats.request(subject.to_owned(), payload.to_vec().into()).await?;
    let elapsed = started.elapsed().as_micros() as u64;
    if reply.payload.starts_with(b"{\"error\"") {
        anyhow::bail!("enrich answered an error: {}", String::from_utf8_lossy(&reply.payload));
    }
    Ok(elapsed.max(1))
}

/// Every payload once, `concurrency` at a time.
async fn sweep(
    nats: &async_nats::Client,
    subject: &str,
    payloads: &Arc<Vec<Vec<u8>>>,
    concurrency: usize,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (nats, subject, payloads, next) = (nats.clone(), subject.to_owned(), payloads.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(payload) = payloads.get(index) else { break };
                h.record(one(&nats, &subject, payload).await?)?;
            }
            anyhow::Ok(h)
        }));
    }
    let mut merged = histogram();
    for task in tasks {
        merged.add(task.await??)?;
    }
    let rate = merged.len() as f64 / started.elapsed().as_secs_f64();
    Ok((merged, rate))
}

async fn closed_loop(
    nats: &async_nats::Client,
    subject: &str,
    payloads: &Arc<Vec<Vec<u8>>>,
    concurrency: usize,
    seconds: u64,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (nats, subject, payloads) = (nats.clone(), subject.to_owned(), payloads.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut index = worker * 7919;
            while Instant::now() < deadline {
                index = (index + 1) % payloads.len();
                h.record(one(&nats, &subject, &payloads[index]).await?)?;
            }
            anyhow::Ok(h)
        }));
    }
    let mut merged = histogram();
    for task in tasks {
        merged.add(task.await??)?;
    }
    Ok((merged.clone(), merged.len() as f64 / started.elapsed().as_secs_f64()))
}

/// The floor under the paced run: the same requests at the same rate through the same
/// NATS server, answered at once (with a reply of enrich's size) by a responder on a
/// connection of its own; what the machine, NATS and this client cost without enrich.
async fn echo_baseline(
    nats: &async_nats::Client,
    common: &CommonConfig,
    scratch: &Scratch,
    payloads: &Arc<Vec<Vec<u8>>>,
    reply_bytes: usize,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let responder = async_nats::connect(common.nats_servers()).await?;
    let subject = scratch.topology.subject("bench.echo");
    let mut requests = responder.subscribe(subject.clone()).await?;
    responder.flush().await?;
    let reply: bytes::Bytes = vec![b' '; reply_bytes].into();
    let answering = tokio::spawn({
        let responder = responder.clone();
        async move {
            while let Some(request) = requests.next().await {
                if let Some(inbox) = request.reply {
                    let _ = responder.publish(inbox, reply.clone()).await;
                }
            }
        }
    });
    let outcome = paced(nats, &subject, payloads, rate, seconds).await;
    answering.abort();
    outcome
}

/// A steady offered rate; latency measured from each request's own send.
async fn paced(
    nats: &async_nats::Client,
    subject: &str,
    payloads: &Arc<Vec<Vec<u8>>>,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let total = rate * seconds;
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<anyhow::Result<u64>>();
    for index in 0..total as usize {
        ticker.tick().await;
        let (nats, subject, payloads, sender) = (nats.clone(), subject.to_owned(), payloads.clone(), sender.clone());
        tokio::spawn(async move {
            let _ = sender.send(one(&nats, &subject, &payloads[index % payloads.len()]).await);
        });
    }
    drop(sender);
    let mut merged = histogram();
    while let Some(result) = receiver.recv().await {
        merged.record(result?)?;
    }
    Ok((merged.clone(), merged.len() as f64 / started.elapsed().as_secs_f64()))
}

async fn sql_baseline(
    pool: &sqlx::PgPool,
    pairs: &[(Uuid, Uuid)],
    concurrency: usize,
    seconds: u64,
) -> anyhow::Result<(Histogram<u64>, f64)> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let pairs = Arc::new(pairs.to_vec());
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (pool, pairs) = (pool.clone(), pairs.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut index = worker * 7919;
            while Instant::now() < deadline {
                index = (index + 1) % pairs.len();
                let (npc_id, player_id) = pairs[index];
                let begun = Instant::now();
                let rows: Vec<(Uuid, String, Vec<String>, f64)> = sqlx::query_as(
                    "SELECT id, content, tags, importance FROM memories
                     WHERE npc_id = $1 AND player_id = $2 AND safety_flag <> 'suspect'",
                )
                .bind(npc_id)
                .bind(player_id)
                .fetch_all(&pool)
                .await?;
                let transcripts: Vec<(serde_json::Value,)> = sqlx::query_as(
                    "SELECT transcript FROM conversations WHERE npc_id = $1 AND player_id = $2 ORDER BY ended_at",
                )
                .bind(npc_id)
                .bind(player_id)
                .fetch_all(&pool)
                .await?;
                std::hint::black_box((rows, transcripts));
                h.record((begun.elapsed().as_micros() as u64).max(1))?;
            }
            anyhow::Ok(h)
        }));
    }
    let mut merged = histogram();
    for task in tasks {
        merged.add(task.await??)?;
    }
    Ok((merged.clone(), merged.len() as f64 / started.elapsed().as_secs_f64()))
}

/// The median and the lowest and highest of `values` (zeros when there are none).
fn median_and_range(values: &mut [f64]) -> (f64, f64, f64) {
    // With an even count, the upper of the two middle values.
    values.sort_by(f64::total_cmp);
    match (values.first(), values.last()) {
        (Some(&low), Some(&high)) => (values[values.len() / 2], low, high),
        _ => (0.0, 0.0, 0.0),
    }
}

fn print_run(label: &str, histogram: &Histogram<u64>, rate: f64) {
    println!(
        "{label}: {rate:.0} requests/s; p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms ({} requests)",
        histogram.value_at_quantile(0.5) as f64 / 1000.0,
        histogram.value_at_quantile(0.99) as f64 / 1000.0,
        histogram.value_at_quantile(0.999) as f64 / 1000.0,
        histogram.len()
    );
}
