//! `npcmem bench gossip`: the gossip leader's tick over 100,000 NPCs in 10,000 rooms with
//! seeded facts, in this process on a scratch database: tick duration p50/p99 (commit
//! included) and exchanges/s at budgets 3, 100 and 1,000, the pair-queue rebuild after
//! 1,000 NPCs move, and RSS. Baseline: one raw INSERT of the same number of fact rows.
//! The budgets run in a still world (ticks skip their refresh: nothing was notified);
//! budget 100 runs again with 100 NPCs moving before each tick, which each tick reloads,
//! and with 100 NPCs learning a fact from the world before each tick, which may send a
//! tick's insert back to be checked in Postgres.

use std::time::{Duration, Instant};

use chrono::Utc;

use async_nats::jetstream;
use hdrhistogram::Histogram;
use npcmem_gossip::tick::Ticker;
use npcmem_service::CommonConfig;
use npcmem_store::knowledge;
use uuid::Uuid;

use super::scratch::Scratch;

#[derive(Debug, Clone, clap::Args)]
pub struct GossipBenchArgs {
    #[arg(long, default_value_t = 100_000)]
    npcs: i64,
    #[arg(long, default_value_t = 10_000)]
    rooms: i64,
    /// One NPC in this many starts with a gossip-worthy fact (3: enough that budget 1,000
    /// does not run out of listeners within the measured ticks).
    #[arg(long, default_value_t = 3)]
    fact_every: i64,
    #[arg(long, value_delimiter = ',', default_value = "3,100,1000")]
    budgets: Vec<usize>,
    /// Ticks measured per budget.
    #[arg(long, default_value_t = 200)]
    ticks: usize,
}

pub async fn run(common: &CommonConfig, args: GossipBenchArgs) -> anyhow::Result<()> {
    let nats = async_nats::connect(common.nats_servers()).await?;
    let js = jetstream::new(nats);
    let id = format!("{}{}", std::process::id(), chrono::Utc::now().timestamp() % 100_000);
    let scratch = Scratch::create(common, &js, &format!("{id}g")).await?;
    let outcome = measure(&scratch, &args).await;
    scratch.remove(&js).await;
    outcome
}

async fn measure(scratch: &Scratch, args: &GossipBenchArgs) -> anyhow::Result<()> {
    let pool = &scratch.pool;
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO npc_locations (npc_id, room_id, as_of)
         SELECT gen_random_uuid(), 'room-' || (i % $2), now() - interval '1 minute' FROM generate_series(1, $1) AS i",
    )
    .bind(args.npcs)
    .bind(args.rooms)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, category, content, tags, confidence, importance, source, origin_fact_id, created_at)
         SELECT f.id, l.npc_id, 'world_event', 'Bandits were seen near ' || l.room_id, ARRAY['bandits'], 0.9, 0.8,
                'authored', f.id, now() - interval '1 minute'
         FROM (SELECT npc_id, room_id, row_number() OVER () AS n FROM npc_locations) AS l,
              LATERAL (SELECT gen_random_uuid() AS id, l.n AS n) AS f
         WHERE l.n % $1 = 0",
    )
    .bind(args.fact_every)
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    let seeded_facts: i64 = sqlx::query_scalar("SELECT count(*) FROM knowledge_facts").fetch_one(pool).await?;
    println!(
        "seeded {} NPCs in {} rooms, {seeded_facts} facts, in {:.1} s",
        args.npcs,
        args.rooms,
        started.elapsed().as_secs_f64()
    );

    // Raw baseline: inserting 1,000 fact rows in one statement and commit (gossip rows, as a
    // tick writes them, so the leader does not load them as new facts).
    let raw_started = Instant::now();
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, category, content, confidence, importance, source, origin_fact_id)
         SELECT gen_random_uuid(), gen_random_uuid(), 'world_event', 'baseline', 0.1, 0.1, 'gossip', gen_random_uuid()
         FROM generate_series(1, 1000)",
    )
    .execute(pool)
    .await?;
    let raw_ms = raw_started.elapsed().as_secs_f64() * 1000.0;
    println!("raw baseline: one INSERT of 1,000 fact rows: {raw_ms:.1} ms");
    let mut raw_tick = RawTickWrites::create(pool).await?;
    for _ in 0..args.ticks {
        raw_tick.write().await?;
    }
    let alone = raw_tick.take()?;
    println!(
        "raw baseline: a budget-100 tick's write alone (100 fact rows and 100 outbox rows of {RAW_PAYLOAD_BYTES} bytes in one statement, \
         on copies of the tables), {} times: p50 {:.2} ms, p99 {:.2} ms",
        args.ticks,
        alone.p50_ms(),
        alone.p99_ms()
    );

    let mut ticker = Ticker::new(pool.clone(), scratch.topology.clone(), None, 1);
    ticker.watch_changes().await?;
    let load_started = Instant::now();
    let first = ticker.tick().await?;
    println!(
        "leader start (full load + first rebuild, {} pairs): {:.0} ms",
        first.rebuilt_pairs,
        load_started.elapsed().as_secs_f64() * 1000.0
    );
    for budget in &args.budgets {
        ticker.budget = *budget;
        let label = format!("budget {budget}");
        // At budget 100 a raw tick write follows each tick, so both see the same machine.
        let interleaved = if *budget == 100 { Some(&mut raw_tick) } else { None };
        measure_ticks(&mut ticker, &scratch.topology, &label, args.ticks, Change::Still, args.rooms, interleaved)
            .await?;
    }
    print_world(&ticker, "after the still world's ticks");
    // A world on the move: before each tick, 100 NPCs move (written as the world consumer
    // writes them), so the tick reloads and re-pairs their rooms.
    let movers: Vec<Uuid> = sqlx::query_scalar("SELECT npc_id FROM npc_locations ORDER BY npc_id LIMIT $1")
        .bind((args.ticks * MOVES_PER_TICK) as i64)
        .fetch_all(pool)
        .await?;
    ticker.budget = 100;
    let label = format!("budget 100, {MOVES_PER_TICK} NPCs moving before each tick");
    let moving = Change::Moving(&movers);
    measure_ticks(&mut ticker, &scratch.topology, &label, args.ticks, moving, args.rooms, Some(&mut raw_tick)).await?;
    // A world that learns: before each tick, 100 NPCs learn a world event from the world
    // (as the world consumer stores it). A listener that learned one since the leader's
    // load sends the tick's insert back to be checked in Postgres.
    let learners: Vec<Uuid> =
        sqlx::query_scalar("SELECT npc_id FROM npc_locations ORDER BY md5(npc_id::text) LIMIT $1")
            .bind((args.ticks * MOVES_PER_TICK) as i64)
            .fetch_all(pool)
            .await?;
    let label = format!("budget 100, {MOVES_PER_TICK} NPCs learning a fact from the world before each tick");
    let learning = Change::Learning(&learners);
    measure_ticks(&mut ticker, &scratch.topology, &label, args.ticks, learning, args.rooms, Some(&mut raw_tick))
        .await?;
    raw_tick.remove().await?;
    let npcs: Vec<Uuid> = sqlx::query_scalar("SELECT npc_id FROM npc_locations LIMIT 1000").fetch_all(pool).await?;
    for (index, npc) in npcs.iter().enumerate() {
        ticker.world.queue.moved(*npc, &format!("room-{}", (index * 7919) as i64 % args.rooms));
    }
    let rebuild_started = Instant::now();
    let added = ticker.world.queue.rebuild();
    println!(
        "queue rebuild after {} moves: {:.2} ms ({added} pairs)",
        npcs.len(),
        rebuild_started.elapsed().as_secs_f64() * 1000.0
    );
    print_world(&ticker, "at the end");
    Ok(())
}

const MOVES_PER_TICK: usize = 100;

/// What changes in the world before each measured tick (outside its time), to
/// `MOVES_PER_TICK` NPCs of the list at a time.
#[derive(Clone, Copy)]
enum Change<'a> {
    Still,
    Moving(&'a [Uuid]),
    Learning(&'a [Uuid]),
}

impl Change<'_> {
    async fn before_tick(
        &self,
        ticker: &Ticker,
        topology: &npcmem_bus::Topology,
        tick: usize,
        rooms: i64,
    ) -> anyhow::Result<()> {
        let (npcs, learning) = match self {
            Change::Still => return Ok(()),
            Change::Moving(npcs) => (*npcs, false),
            Change::Learning(npcs) => (*npcs, true),
        };
        let Some(chunk) = npcs.chunks(MOVES_PER_TICK).nth(tick) else { return Ok(()) };
        let mut connection = ticker.pool.acquire().await?;
        if learning {
            let facts: Vec<knowledge::NewFact> = chunk.iter().map(|npc| learned_world_event(*npc, tick)).collect();
            let holders: Vec<Uuid> = chunk.to_vec();
            let mut transaction = sqlx::Connection::begin(&mut *connection).await?;
            npcmem_gossip::learn::store_facts(&mut transaction, topology, facts, &holders, |_| None).await?;
            transaction.commit().await?;
        } else {
            let moves: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(index, npc)| (*npc, format!("room-{}", ((tick * 7 + index) * 7919) as i64 % rooms), Utc::now()))
                .collect();
            knowledge::record_locations(&mut connection, &moves).await?;
        }
        // The change's notification reaches the leader between ticks, as it would.
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    }
}

/// A world event an NPC learns from the world: the seeded facts' category and (no)
/// subject, so a listener's new one may contradict a copy told to it; too unimportant to
/// spread itself.
fn learned_world_event(npc: Uuid, tick: usize) -> knowledge::NewFact {
    let id = Uuid::now_v7();
    knowledge::NewFact {
        fact: npcmem_core::gossip::HeldFact {
            id,
            origin_fact_id: id,
            holder: npc,
            category: npcmem_core::wire::KnowledgeCategory::WorldEvent,
            subject_id: None,
            content: format!("The market was busy on day {tick}"),
            tags: vec!["market".into()],
            confidence: 1.0,
            importance: 0.3,
            hop_count: 0,
            provenance: Vec::new(),
            expires_at: None,
            perspective: None,
        },
        source: knowledge::Source::Authored,
        source_memory_id: None,
        speaker_id: None,
    }
}

/// Measures `ticks` ticks back to back and prints their duration and exchanges/s, with
/// `change` made before each tick. With `raw`, a raw tick write follows each tick, and the
/// ticks are compared with those writes.
async fn measure_ticks(
    ticker: &mut Ticker,
    topology: &npcmem_bus::Topology,
    label: &str,
    ticks: usize,
    change: Change<'_>,
    rooms: i64,
    mut raw: Option<&mut RawTickWrites>,
) -> anyhow::Result<()> {
    let mut latencies = Latencies::new()?;
    let (mut exchanges, mut reloads, mut rechecks) = (0, 0, 0);
    let (mut busy, mut refresh, mut commit) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for tick in 0..ticks {
        change.before_tick(ticker, topology, tick, rooms).await?;
        let report = ticker.tick().await?;
        latencies.record(report.duration)?;
        exchanges += report.exchanges;
        reloads += usize::from(report.reloaded);
        rechecks += usize::from(report.rechecked);
        busy += report.duration;
        refresh += report.refresh;
        commit += report.commit;
        if let Some(raw) = raw.as_mut() {
            raw.write().await?;
        }
    }
    let mean = |total: Duration| total.as_secs_f64() * 1000.0 / ticks as f64;
    println!(
        "{label}: tick p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {exchanges} exchanges in {ticks} ticks, {:.0} exchanges/s of tick time",
        latencies.p50_ms(),
        latencies.p99_ms(),
        latencies.max_ms(),
        exchanges as f64 / busy.as_secs_f64().max(1e-9)
    );
    println!(
        "  mean per tick: load of changes {:.2} ms ({reloads} of {ticks} ticks loaded changes), commit {:.2} ms (the two run at once; {rechecks} of {ticks} commits checked again in Postgres), the rest {:.2} ms",
        mean(refresh),
        mean(commit),
        mean(busy.saturating_sub(refresh.max(commit)))
    );
    if let Some(raw) = raw {
        let raw = raw.take()?;
        println!(
            "  vs the raw write of a budget-100 tick, one after each tick (p50 {:.2} ms, p99 {:.2} ms): p50 {:.2}x, p99 {:.2}x",
            raw.p50_ms(),
            raw.p99_ms(),
            latencies.p50_ms() / raw.p50_ms(),
            latencies.p99_ms() / raw.p99_ms()
        );
    }
    Ok(())
}

/// Durations in microseconds.
struct Latencies(Histogram<u64>);

impl Latencies {
    fn new() -> anyhow::Result<Self> {
        Ok(Self(Histogram::new_with_bounds(1, 60_000_000, 3)?))
    }

    fn record(&mut self, duration: Duration) -> anyhow::Result<()> {
        self.0.record((duration.as_micros() as u64).max(1))?;
        Ok(())
    }

    fn p50_ms(&self) -> f64 {
        self.0.value_at_quantile(0.5) as f64 / 1000.0
    }

    fn p99_ms(&self) -> f64 {
        self.0.value_at_quantile(0.99) as f64 / 1000.0
    }

    fn max_ms(&self) -> f64 {
        self.0.max() as f64 / 1000.0
    }
}

/// Roughly the size of an `event.knowledge.learned` payload.
const RAW_PAYLOAD_BYTES: usize = 650;

/// The database's share of a budget-100 tick without the leader: as many fact and outbox
/// rows of the same size in one plain statement and commit (no duplicate check, no
/// triggers), into copies of the two tables as full as the real ones at the start (so the
/// ticks measured are not disturbed), on a connection of its own.
struct RawTickWrites {
    connection: sqlx::pool::PoolConnection<sqlx::Postgres>,
    payloads: Vec<Vec<u8>>,
    latencies: Latencies,
}

impl RawTickWrites {
    async fn create(pool: &sqlx::PgPool) -> anyhow::Result<Self> {
        sqlx::raw_sql(
            "CREATE TABLE raw_facts (LIKE knowledge_facts INCLUDING ALL);
             INSERT INTO raw_facts SELECT * FROM knowledge_facts;
             CREATE TABLE raw_outbox (LIKE outbox INCLUDING ALL);",
        )
        .execute(pool)
        .await?;
        sqlx::query("VACUUM ANALYZE raw_facts, raw_outbox").execute(pool).await?;
        Ok(Self {
            connection: pool.acquire().await?,
            payloads: vec![vec![b'x'; RAW_PAYLOAD_BYTES]; 100],
            latencies: Latencies::new()?,
        })
    }

    async fn write(&mut self) -> anyhow::Result<()> {
        // Every value bound, as the leader binds them (time-ordered fact ids, as its own).
        let ids: Vec<Uuid> = (0..100).map(|_| Uuid::now_v7()).collect();
        let npcs: Vec<Uuid> = (0..100).map(|_| Uuid::new_v4()).collect();
        let origins: Vec<Uuid> = (0..100).map(|_| Uuid::new_v4()).collect();
        let speakers: Vec<Uuid> = (0..100).map(|_| Uuid::new_v4()).collect();
        let msg_ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        let started = Instant::now();
        sqlx::query(
            "WITH facts AS (
                 INSERT INTO raw_facts (id, npc_id, category, content, tags, confidence, importance, source,
                                        origin_fact_id, hop_count, provenance, speaker_id)
                 SELECT id, npc_id, 'world_event', 'Bandits were seen near room-1234', '{bandits}', 0.8, 0.8,
                        'gossip', origin_fact_id, 1, ARRAY[speaker_id], speaker_id
                 FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[]) AS r(id, npc_id, origin_fact_id, speaker_id))
             INSERT INTO raw_outbox (subject, msg_id, payload)
             SELECT 'raw.knowledge.learned', msg_id, payload FROM UNNEST($5::text[], $6::bytea[]) AS m(msg_id, payload)",
        )
        .bind(&ids)
        .bind(&npcs)
        .bind(&origins)
        .bind(&speakers)
        .bind(&msg_ids)
        .bind(&self.payloads)
        .execute(&mut *self.connection)
        .await?;
        self.latencies.record(started.elapsed())?;
        Ok(())
    }

    /// The writes recorded since the last take.
    fn take(&mut self) -> anyhow::Result<Latencies> {
        Ok(std::mem::replace(&mut self.latencies, Latencies::new()?))
    }

    async fn remove(mut self) -> anyhow::Result<()> {
        sqlx::raw_sql("DROP TABLE raw_facts, raw_outbox").execute(&mut *self.connection).await?;
        Ok(())
    }
}

/// The leader's world and the bench process's RSS (the world is most of it).
fn print_world(ticker: &Ticker, when: &str) {
    let size = ticker.world.size();
    println!(
        "leader's world {when}: {} NPCs placed, {} spreadable facts, {} (holder, origin) known, {} claim keys, {} pairs queued",
        size.npcs_placed, size.spreadable_facts, size.known, size.claim_keys, size.queued_pairs
    );
    if let Some((current, peak)) = super::rss::rss_kib(std::process::id()) {
        println!("  bench process RSS {:.1} MB, peak {:.1} MB", current as f64 / 1024.0, peak as f64 / 1024.0);
    }
}
