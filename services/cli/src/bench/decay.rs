//! `npcmem bench decay`: seconds for the consolidate service's decay job over
//! 1,000,000 memories in 4,000 pairs (250 episodic each, so the caps prune 200,000),
//! beside the raw baseline of one un-batched UPDATE of the same formula over an
//! index-less copy of the table, measured in the same run on a scratch database.

use std::time::Instant;

use anyhow::bail;
use async_nats::jetstream;
use npcmem_consolidate::JobContext;
use npcmem_service::CommonConfig;

use super::scratch::Scratch;

#[derive(Debug, Clone, clap::Args)]
pub struct DecayBenchArgs {
    #[arg(long, default_value_t = 4_000)]
    pairs: i64,
    /// Episodic memories per pair (the cap is 200).
    #[arg(long, default_value_t = 250)]
    per_pair: i64,
    #[arg(long, default_value_t = 2_000)]
    decay_batch_pages: i64,
    #[arg(long, default_value_t = 32)]
    slices: u32,
}

pub async fn run(common: &CommonConfig, args: DecayBenchArgs) -> anyhow::Result<()> {
    let nats = async_nats::connect(common.nats_servers()).await?;
    let js = jetstream::new(nats);
    let id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let scratch = Scratch::create(common, &js, &format!("{id}d")).await?;
    let outcome = measure(&scratch, &args).await;
    scratch.remove(&js).await;
    outcome
}

async fn measure(scratch: &Scratch, args: &DecayBenchArgs) -> anyhow::Result<()> {
    let pool = &scratch.pool;
    let total = args.pairs * args.per_pair;
    let started = Instant::now();
    // Ages up to 120 days, importance up to the 0.7 cap, 1 % locked: like a busy world.
    sqlx::query(
        "INSERT INTO memories (id, npc_id, player_id, memory_type, content, tags, importance, confidence, salience,
                               emotional_intensity, access_count, locked, source_conversation_id, created_at,
                               last_accessed)
         SELECT gen_random_uuid(), p.npc_id, p.player_id, 'episodic',
                'The player traded with me in the market square.',
                ARRAY[(ARRAY['trade','helpful','threat','gift','insult'])[1 + (i % 5)]],
                round((random() * 0.7)::numeric, 3)::float8, 0.9, 0.5, random(), (random() * 20)::int,
                i % 100 = 0, gen_random_uuid(), at, at
         FROM (SELECT gen_random_uuid() AS npc_id, gen_random_uuid() AS player_id FROM generate_series(1, $1)) AS p,
              generate_series(1, $2) AS i,
              LATERAL (SELECT now() - random() * interval '120 days' + (i * 0) * interval '1 s' AS at) AS t",
    )
    .bind(args.pairs)
    .bind(args.per_pair)
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE memories").execute(pool).await?;
    println!("seeded {total} memories over {} pairs in {:.1} s", args.pairs, started.elapsed().as_secs_f64());

    // Raw baseline: the same salience formula as one UPDATE over an index-less copy.
    sqlx::query("CREATE TABLE memories_raw AS SELECT * FROM memories").execute(pool).await?;
    sqlx::query("VACUUM ANALYZE memories_raw").execute(pool).await?;
    let raw_started = Instant::now();
    sqlx::query(
        "UPDATE memories_raw SET salience = round(LEAST(importance
             * exp(-GREATEST(extract(epoch FROM (now() - last_accessed)) / 86400.0, 0) / (30 * (1 + 0.1 * emotional_intensity)))
             * LEAST(1 + ln(1 + access_count) * 0.1, 1.5), 1.0)::numeric, 3)::float8
         WHERE NOT locked",
    )
    .execute(pool)
    .await?;
    let raw_seconds = raw_started.elapsed().as_secs_f64();
    sqlx::query("DROP TABLE memories_raw").execute(pool).await?;

    let jobs = JobContext {
        pool: pool.clone(),
        nats: None,
        topology: scratch.topology.clone(),
        decay_batch_pages: args.decay_batch_pages,
        slices: args.slices,
        recall_max_turns: 5_000,
    };
    let decay_started = Instant::now();
    let outcome = jobs.decay(chrono::Utc::now()).await?;
    let seconds = decay_started.elapsed().as_secs_f64();
    let over_cap: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM memories WHERE memory_type = 'episodic'
                                GROUP BY npc_id, player_id HAVING count(*) > 200) AS over",
    )
    .fetch_one(pool)
    .await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM memories").fetch_one(pool).await?;
    println!();
    println!(
        "raw baseline (one UPDATE of the salience formula over an index-less copy): {raw_seconds:.1} s ({:.0} rows/s)",
        total as f64 / raw_seconds
    );
    println!(
        "decay job: {seconds:.1} s for {total} memories ({:.2}× the raw baseline): rescored {}, pruned {}, {left} left",
        seconds / raw_seconds.max(0.001),
        outcome["rescored"],
        outcome["pruned"]
    );
    let expected_pruned = args.pairs * (args.per_pair - 200).max(0);
    if over_cap > 0 || outcome["pruned"].as_i64() != Some(expected_pruned) {
        bail!(
            "caps do not hold: {over_cap} pairs over 200 episodic, pruned {} (expected {expected_pruned})",
            outcome["pruned"]
        );
    }
    Ok(())
}
