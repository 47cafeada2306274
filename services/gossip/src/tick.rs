//! The gossip tick (seed `GossipSystem.update`): one leader replica keeps the world in
//! memory — rooms, drives, spreadable facts, who knows what — refreshed from Postgres
//! each tick with what changed, and spends the tick's budget on the pre-computed queue
//! of co-located pairs. A tick's exchanges commit together with their outbox rows, so a
//! crash loses only exchanges that never happened.

use foldhash::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use npcmem_bus::Topology;
use npcmem_core::gossip::contradiction::{self, Outcome, Revision};
use npcmem_core::gossip::{Drives, GossipQueue, HeldFact, propagate, select};
use npcmem_store::knowledge::{self, ForgottenFact, Known, NewFact, Source, WorldChanges};
use npcmem_store::outbox::OutboxMessage;
use npcmem_store::{PgConnection, PgPool, StoreError, switches};
use sqlx::Postgres;
use sqlx::pool::PoolConnection;
use uuid::Uuid;

use crate::learn::{Check, Stored, invalidate_npcs, prepare_facts, secret_learned, write_facts};

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TickReport {
    pub exchanges: usize,
    pub pairs_tried: usize,
    pub rebuilt_pairs: usize,
    pub duration: Duration,
    /// Of `duration`: loading changes, and the commit of the exchanges (these two run at
    /// once, so they may add up to more than `duration`).
    pub refresh: Duration,
    pub commit: Duration,
    /// Whether the tick loaded changes (it skips that when it heard of none).
    pub reloaded: bool,
    /// Whether its insert was refused because a listener learned a fact the leader had
    /// not loaded, so the batch was checked in Postgres and written again.
    pub rechecked: bool,
    pub skipped: bool,
    /// The leader's in-memory world after the tick (`npcmem_gossip_world_entries`).
    pub world: WorldSizes,
}

/// Entries of the leader's in-memory world, for watching its memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorldSizes {
    /// NPCs holding a fact they may tell.
    pub holders: usize,
    /// (holder, origin fact) pairs known, told or superseded.
    pub known: usize,
    /// (holder, claim key) pairs of the facts held.
    pub claims: usize,
    /// (listener, origin fact) copies a full listener refused lately.
    pub refused: usize,
}

/// The leader's view of the world.
#[derive(Default)]
pub struct World {
    pub queue: GossipQueue,
    facts: HashMap<Uuid, Vec<HeldFact>>,
    /// Who knows which origin fact, as [`known_key`]s: 8 bytes a pair instead of 32 (the
    /// gossip bench's RSS measured 17 MB less with 255,000 pairs).
    known: HashSet<u64>,
    /// Facts each NPC holds, as far as this leader knows: the cap is only checked in SQL
    /// for holders near it.
    held: HashMap<Uuid, usize>,
    drives: HashMap<Uuid, Drives>,
    /// The claim keys of what each NPC holds, hashed with the holder: a new fact whose
    /// opposing keys are not here contradicts nothing its listener holds, and its
    /// exchange skips the contradiction read (`contradiction::claim_keys`).
    claims: HashSet<u64>,
    /// (listener, origin) [`known_key`]s of copies the listener's cap dropped at once: not
    /// told again (it would be dropped again) until [`REFUSALS_KEPT`] has passed.
    refused: HashSet<u64>,
    refused_since: Option<Instant>,
    /// The visibility horizon of the last refresh: changes before it are in memory.
    watermark: Option<DateTime<Utc>>,
}

/// How long the leader remembers copies a listener's cap dropped at once: the listener's
/// facts change, and a copy refused an hour ago may fit now.
const REFUSALS_KEPT: Duration = Duration::from_secs(3600);

/// How much the leader holds in memory (for the bench and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldSize {
    pub npcs_placed: usize,
    pub spreadable_facts: usize,
    pub known: usize,
    pub claim_keys: usize,
    pub queued_pairs: usize,
}

impl World {
    pub fn size(&self) -> WorldSize {
        WorldSize {
            npcs_placed: self.queue.placed(),
            spreadable_facts: self.facts.values().map(Vec::len).sum(),
            known: self.known.len(),
            claim_keys: self.claims.len(),
            queued_pairs: self.queue.len(),
        }
    }

    fn apply_loaded(&mut self, loaded: WorldChanges, now: DateTime<Utc>) {
        self.apply_moves_and_drives(loaded.locations, loaded.drives);
        for forgotten in loaded.forgotten {
            self.unlearn(forgotten);
        }
        for change in loaded.facts {
            if change.superseded {
                self.note_known(change.fact.holder, change.fact.origin_fact_id);
                self.forget_fact(change.fact.holder, change.fact.id);
            } else {
                self.take_in(change.fact, now);
            }
        }
        self.watermark = Some(loaded.horizon);
    }

    fn note_claims(&mut self, fact: &HeldFact) {
        for key in contradiction::claim_keys(fact) {
            self.claims.insert(holder_key(fact.holder, key));
        }
    }

    /// Whether `fact` may contradict something its holder holds (a claim key matches).
    fn may_contradict(&self, fact: &HeldFact) -> bool {
        if self.claims.is_empty() {
            return false;
        }
        contradiction::opposing_keys(fact).into_iter().any(|key| self.claims.contains(&holder_key(fact.holder, key)))
    }

    fn apply_moves_and_drives(&mut self, locations: Vec<(Uuid, String)>, drives: Vec<(Uuid, Drives)>) {
        for (npc, room) in locations {
            self.queue.moved(npc, &room);
        }
        for (npc, drives) in drives {
            self.drives.insert(npc, drives);
        }
    }

    /// Records a fact its holder holds, with its claim keys (loaded, or stored by a tick).
    fn take_in(&mut self, fact: HeldFact, now: DateTime<Utc>) {
        self.note_claims(&fact);
        self.add_fact(fact, now);
    }

    /// Records a fact its holder holds; the spreadable copy in memory is replaced (a
    /// revision may have lowered its confidence) or dropped once no longer worth telling.
    fn add_fact(&mut self, fact: HeldFact, now: DateTime<Utc>) {
        self.note_known(fact.holder, fact.origin_fact_id);
        let holder = fact.holder;
        if !fact.gossip_worthy(now) {
            self.forget_fact(holder, fact.id);
            return;
        }
        let origin = fact.origin_fact_id;
        let held = self.facts.entry(holder).or_default();
        match held.iter_mut().find(|h| h.origin_fact_id == origin) {
            Some(existing) => *existing = fact,
            None => held.push(fact),
        }
        self.queue.set_talker(holder, true);
        // Room mates who do not know it yet may hear it (a move pairs everyone else).
        let known = &self.known;
        self.queue.offer_to_mates(holder, |mate| !known.contains(&known_key(mate, origin)));
    }

    /// Drops a fact from what `holder` may tell (superseded, or no longer worth it).
    fn forget_fact(&mut self, holder: Uuid, fact_id: Uuid) {
        let Some(held) = self.facts.get_mut(&holder) else { return };
        held.retain(|h| h.id != fact_id);
        if held.is_empty() {
            self.facts.remove(&holder);
            self.queue.set_talker(holder, false);
        }
    }

    /// Applies revisions this leader's own exchanges made to facts listeners held.
    fn apply_revisions(&mut self, revisions: &[Revision], now: DateTime<Utc>) {
        for revision in revisions {
            match revision.outcome {
                Outcome::Superseded => self.forget_fact(revision.holder, revision.fact_id),
                Outcome::Doubted { confidence } => {
                    let held = self.facts.get_mut(&revision.holder);
                    let Some(fact) = held.and_then(|held| held.iter_mut().find(|h| h.id == revision.fact_id)) else {
                        continue;
                    };
                    fact.confidence = confidence;
                    if !fact.gossip_worthy(now) {
                        self.forget_fact(revision.holder, revision.fact_id);
                    }
                }
            }
        }
    }

    /// A deleted fact: its holder neither tells it nor knows it any longer (and may learn
    /// it again; a forgotten player's facts cannot come back, as no speaker holds them).
    /// Idempotent: a deletion read twice changes nothing more. A deletion reread after the
    /// fact was learned again is applied before it in the same load.
    fn unlearn(&mut self, forgotten: ForgottenFact) {
        self.forget_fact(forgotten.holder, forgotten.fact_id);
        self.unknow(forgotten.holder, forgotten.origin_fact_id);
    }

    /// A copy the listener's cap dropped at once (counted known until its deletion is
    /// loaded, then refused for a while).
    fn note_refused(&mut self, holder: Uuid, origin: Uuid) {
        self.note_known(holder, origin);
        self.refused.insert(known_key(holder, origin));
    }

    /// Whether `listener` knows `origin` or was refused it lately.
    fn not_to_tell(&self, listener: Uuid, origin: Uuid) -> bool {
        let key = known_key(listener, origin);
        self.known.contains(&key) || self.refused.contains(&key)
    }

    fn expire_refusals(&mut self) {
        match self.refused_since {
            Some(since) if since.elapsed() < REFUSALS_KEPT => {}
            _ => {
                self.refused.clear();
                self.refused_since = Some(Instant::now());
            }
        }
    }

    /// Gives back a copy taken in while its insert ran that was not stored: its listener
    /// may still hear the fact, from this speaker or another.
    fn take_back(&mut self, taken: Taken) {
        self.forget_fact(taken.holder, taken.fact_id);
        self.unknow(taken.holder, taken.origin);
    }

    /// The opposite of [`World::note_known`]; nothing for a pair not known.
    fn unknow(&mut self, holder: Uuid, origin: Uuid) {
        if self.known.remove(&known_key(holder, origin))
            && let Some(held) = self.held.get_mut(&holder)
        {
            *held = held.saturating_sub(1);
        }
    }

    fn note_known(&mut self, holder: Uuid, origin: Uuid) {
        if self.known.insert(known_key(holder, origin)) {
            *self.held.entry(holder).or_default() += 1;
        }
    }
}

pub struct Ticker {
    pub pool: PgPool,
    pub topology: Topology,
    pub nats: Option<async_nats::Client>,
    pub budget: usize,
    pub world: World,
    last_switch_check: Option<Instant>,
    enabled: bool,
    /// Set by `P.control.changed` ([`Ticker::watch_switches`]): re-read the switches now.
    switches: Option<SwitchWatch>,
    changes: Option<ChangeWatch>,
    last_load: Option<Instant>,
    last_prune: Option<Instant>,
    /// The connection ticks commit on, kept between ticks: acquiring from the pool tests
    /// a connection with a round trip first (0.1 ms of a 4 ms tick, measured). Dropped
    /// after a failed tick, so a broken one goes back to the pool to be tested.
    writer: Option<PoolConnection<Postgres>>,
}

/// Without a notification the leader still reloads this often: a safety net for writers
/// whose notifications it cannot see (another database role's triggers disabled, say).
const RELOAD_AT_LEAST_EVERY: Duration = Duration::from_secs(10);
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Listens for [`knowledge::WORLD_CHANGED_CHANNEL`]: whether the world changed since the
/// last refresh started.
struct ChangeWatch {
    changed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChangeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Without `P.control.changed` the leader still re-reads the runtime switches this often.
const SWITCHES_AT_LEAST_EVERY: Duration = npcmem_service::switches::AT_LEAST_EVERY;

/// Listens for `P.control.changed`: whether a runtime switch changed since the last read.
/// Unlike `npcmem_service::switches::follow` (enrich), the tick after an announcement and
/// a leader's first tick read the table themselves rather than wait for a background read.
struct SwitchWatch {
    changed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SwitchWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ticker {
    pub fn new(pool: PgPool, topology: Topology, nats: Option<async_nats::Client>, budget: usize) -> Self {
        Self {
            pool,
            topology,
            nats,
            budget,
            world: World::default(),
            last_switch_check: None,
            enabled: true,
            switches: None,
            changes: None,
            last_load: None,
            last_prune: None,
            writer: None,
        }
    }

    /// Forgets the world and the writer connection, for a replica taking the lead: the
    /// world is loaded afresh, and a connection from an earlier term (perhaps to a
    /// Postgres that restarted since) is not trusted with the first tick.
    pub fn start_over(&mut self) {
        self.world = World::default();
        self.writer = None;
    }

    /// Listens for changes to the world, so that ticks in a world where nothing changed
    /// skip their refresh. Call before the first tick (a notification sent before the
    /// listener is up is lost; the first tick loads everything anyway).
    pub async fn watch_changes(&mut self) -> Result<(), StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(knowledge::WORLD_CHANGED_CHANNEL).await?;
        let changed = Arc::new(AtomicBool::new(true));
        let flag = changed.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(_)) => flag.store(true, Ordering::Release),
                    // The connection dropped (the next call reconnects and listens again):
                    // whatever it missed is reloaded.
                    Ok(None) => flag.store(true, Ordering::Release),
                    Err(sqlx::Error::PoolClosed) => break,
                    Err(error) => {
                        flag.store(true, Ordering::Release);
                        tracing::warn!(%error, "gossip change listener failed; the leader reloads every tick until it is back");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        self.changes = Some(ChangeWatch { changed, task });
        Ok(())
    }

    /// Whether this tick reloads changes: always without a listener, otherwise when it
    /// heard of one (cleared before the load starts, so a change committed during the load
    /// is loaded by the next tick) or the safety net's time is up.
    fn take_reload(&mut self) -> bool {
        let overdue = self.last_load.is_none_or(|at| at.elapsed() >= RELOAD_AT_LEAST_EVERY);
        let heard = self.changes.as_ref().is_none_or(|watch| watch.changed.swap(false, Ordering::AcqRel));
        let reload = heard || overdue;
        if reload {
            self.last_load = Some(Instant::now());
        }
        reload
    }

    /// Loads what changed since the last refresh and applies it: everything on the first
    /// one (the leader just started), then locations, drives and facts learned or revised
    /// since the previous refresh's visibility horizon (database time, so late commits and
    /// clock skew lose nothing; rows seen twice are idempotent).
    pub async fn refresh(&mut self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let loaded = load(&self.pool, self.world.watermark).await?;
        self.world.apply_loaded(loaded, now);
        Ok(())
    }

    /// Listens for `P.control.changed` (needs the NATS client), so a switch set by
    /// `npcmem switch set` is read by the next tick rather than within
    /// [`SWITCHES_AT_LEAST_EVERY`].
    pub async fn watch_switches(&mut self) -> Result<(), async_nats::SubscribeError> {
        let Some(nats) = &self.nats else { return Ok(()) };
        let mut subscription = nats.subscribe(self.topology.control_changed()).await?;
        let changed = Arc::new(AtomicBool::new(false));
        let flag = changed.clone();
        let task = tokio::spawn(async move {
            use futures::StreamExt as _;
            while subscription.next().await.is_some() {
                flag.store(true, Ordering::Release);
            }
        });
        self.switches = Some(SwitchWatch { changed, task });
        Ok(())
    }

    /// Gossip and degraded mode are runtime switches, read when
    /// `P.control.changed` says one changed and at least every [`SWITCHES_AT_LEAST_EVERY`].
    async fn gossip_enabled(&mut self) -> Result<bool, StoreError> {
        let announced = self.switches.as_ref().is_some_and(|watch| watch.changed.swap(false, Ordering::AcqRel));
        if !announced && self.last_switch_check.is_some_and(|at| at.elapsed() < SWITCHES_AT_LEAST_EVERY) {
            return Ok(self.enabled);
        }
        let mut connection = self.pool.acquire().await?;
        self.enabled = switches::read(&mut connection).await?.gossip_runs();
        self.last_switch_check = Some(Instant::now());
        Ok(self.enabled)
    }

    /// One tick: refresh, re-pair dirty rooms, spend the budget, commit.
    pub async fn tick(&mut self) -> Result<TickReport, StoreError> {
        let started = Instant::now();
        let now = Utc::now();
        if !self.gossip_enabled().await? {
            return Ok(TickReport { skipped: true, duration: started.elapsed(), ..TickReport::default() });
        }
        // A starting leader loads the world before its first plan; after that, each tick
        // plans on what the previous tick loaded and, when the world changed, loads the
        // next changes while its exchanges commit (a change reaches the plan a tick later).
        let mut refresh = Duration::ZERO;
        if self.world.watermark.is_none() {
            let refresh_started = Instant::now();
            // The full load covers every change heard of so far: the tick loads no more.
            self.take_reload();
            self.refresh(now).await?;
            refresh = refresh_started.elapsed();
        }
        self.world.expire_refusals();
        let rebuilt_pairs = if self.world.queue.is_dirty() { self.world.queue.rebuild() } else { 0 };
        let mut exchanges: Vec<(HeldFact, Uuid)> = Vec::new();
        let mut planned: HashSet<(Uuid, Uuid)> = HashSet::default();
        let mut pairs_tried = 0;
        let mut requeue = Vec::new();
        // A pair without anything to say is dropped; give up after many such pairs so a
        // tick stays O(budget) even when the queue holds little of value.
        while exchanges.len() < self.budget && pairs_tried < self.budget * 20 {
            let Some((speaker, listener)) = self.world.queue.next_pair() else { break };
            pairs_tried += 1;
            let Some(candidates) = self.world.facts.get(&speaker) else { continue };
            let drives = self.world.drives.get(&speaker).copied().unwrap_or_default();
            let world = &self.world;
            let chosen = select(
                candidates,
                listener,
                &drives,
                |origin| world.not_to_tell(listener, origin) || planned.contains(&(listener, origin)),
                now,
            );
            if let Some(fact) = chosen {
                planned.insert((listener, fact.origin_fact_id));
                // Time-ordered ids: a tick's new rows share the primary key's last page.
                exchanges.push((propagate(fact, speaker, listener, Uuid::now_v7()), speaker));
                requeue.push((speaker, listener));
            }
        }
        for (speaker, listener) in requeue {
            self.world.queue.offer(speaker, listener);
        }
        let write = self.plan_write(exchanges, now);
        let reload = self.take_reload();
        let (pool, topology, watermark) = (&self.pool, &self.topology, self.world.watermark);
        let load_changes = async move { if reload { load(pool, watermark).await.map(Some) } else { Ok(None) } };
        let writer = self.writer.take();
        // The copies the world took in while their insert ran.
        let mut taken_in = None;
        let (world, taken) = (&mut self.world, &mut taken_in);
        let commit_planned = async move {
            let mut connection = match writer {
                Some(connection) => connection,
                None => pool.acquire().await?,
            };
            let stored = write_planned(&mut connection, topology, write, world, taken).await?;
            Ok((stored, connection))
        };
        // Both run to the end: a failed load must not cancel a commit on its way.
        let (loaded, committed) = tokio::join!(timed(load_changes), timed(commit_planned));
        let ((stored, writer), commit) = match committed {
            Ok(committed) => committed,
            Err(error) => {
                // Whether the exchanges were stored is unknown (the connection may have
                // dropped after the commit reached Postgres): the world is loaded afresh.
                self.start_over();
                return Err(error);
            }
        };
        self.writer = Some(writer);
        let loaded = match loaded {
            Ok((loaded, load_time)) => {
                refresh += load_time;
                loaded
            }
            Err(error) => {
                // The watermark stays: the next tick loads these changes again.
                tracing::warn!(%error, "gossip: loading world changes failed; the next tick tries again");
                self.last_load = None;
                None
            }
        };
        // Planned exchanges a listener turned out to know already did not happen.
        let exchanges = stored.as_ref().map_or(0, |stored| stored.facts.len());
        let rechecked = stored.as_ref().is_some_and(|stored| stored.rechecked);
        if let Some(stored) = stored {
            self.apply_stored(stored, taken_in, now).await;
        }
        if let Some(loaded) = loaded {
            self.world.apply_loaded(loaded, now);
            self.prune_forgotten();
        }
        Ok(TickReport {
            exchanges,
            pairs_tried,
            rebuilt_pairs,
            duration: started.elapsed(),
            refresh,
            commit,
            reloaded: reload,
            rechecked,
            skipped: false,
            world: WorldSizes {
                holders: self.world.facts.len(),
                known: self.world.known.len(),
                claims: self.world.claims.len(),
                refused: self.world.refused.len(),
            },
        })
    }

    /// Every [`PRUNE_EVERY`], in the background, drops the deletion log's rows stamped an
    /// hour or more before this leader's watermark: it read them long ago, and a new
    /// leader loads the world afresh.
    fn prune_forgotten(&mut self) {
        if self.last_prune.is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
            return;
        }
        let Some(watermark) = self.world.watermark else { return };
        self.last_prune = Some(Instant::now());
        let pool = self.pool.clone();
        tokio::spawn(async move {
            let before = watermark - chrono::TimeDelta::hours(1);
            let pruned = async { knowledge::prune_forgotten(&mut *pool.acquire().await?, before).await };
            if let Err(error) = pruned.await {
                tracing::warn!(%error, "gossip: pruning the deletion log failed; the next prune tries again");
            }
        });
    }

    /// What committing `exchanges` takes, decided from the leader's memory.
    fn plan_write(&self, exchanges: Vec<(HeldFact, Uuid)>, now: DateTime<Utc>) -> PlannedWrite {
        let suspects: HashSet<Uuid> =
            exchanges.iter().filter(|(fact, _)| self.world.may_contradict(fact)).map(|(fact, _)| fact.id).collect();
        let facts: Vec<NewFact> = exchanges
            .into_iter()
            .map(|(fact, speaker)| NewFact {
                fact,
                source: Source::Gossip,
                source_memory_id: None,
                speaker_id: Some(speaker),
            })
            .collect();
        // A listener may hear several facts in one tick (large budgets).
        let mut hearing: HashMap<Uuid, usize> = HashMap::default();
        for new in &facts {
            *hearing.entry(new.fact.holder).or_default() += 1;
        }
        let near_cap: Vec<Uuid> = hearing
            .into_iter()
            .filter(|(holder, count)| {
                self.world.held.get(holder).copied().unwrap_or(0) + count >= npcmem_core::gossip::MAX_FACTS_PER_NPC
            })
            .map(|(holder, _)| holder)
            .collect();
        // Always set once the world is loaded; the epoch would make every fact count as
        // unseen (each tick checked in Postgres), never one as seen.
        let loaded_since = self.world.watermark.unwrap_or(DateTime::UNIX_EPOCH);
        PlannedWrite { facts, suspects, near_cap, loaded_since, now }
    }

    /// Takes a committed tick's facts and revisions into memory (unless the world took the
    /// facts in while they were written: then it forgets those not stored), then tells the
    /// enrichers.
    async fn apply_stored(&mut self, stored: Stored, taken_in: Option<Vec<Taken>>, now: DateTime<Utc>) {
        let listeners: HashSet<Uuid> = stored.facts.iter().map(|new| new.fact.holder).collect();
        match taken_in {
            Some(taken) => {
                if taken.len() != stored.facts.len() {
                    let stored: HashSet<Uuid> = stored.facts.iter().map(|new| new.fact.id).collect();
                    for taken in taken.into_iter().filter(|taken| !stored.contains(&taken.fact_id)) {
                        self.world.take_back(taken);
                    }
                }
            }
            None => {
                self.world.apply_revisions(&stored.revisions, now);
                for new in stored.facts {
                    self.world.take_in(new.fact, now);
                }
                // Told, then dropped at once by the cap: told again, it would be dropped again.
                for (holder, origin) in stored.dropped {
                    self.world.note_refused(holder, origin);
                }
            }
        }
        if let Some(nats) = &self.nats {
            invalidate_npcs(nats, &self.topology, listeners).await;
        }
    }
}

/// Runs `future` and times it.
async fn timed<T>(future: impl Future<Output = Result<T, StoreError>>) -> Result<(T, Duration), StoreError> {
    let started = Instant::now();
    let output = future.await?;
    Ok((output, started.elapsed()))
}

/// Reads what changed since `watermark` (everything without one), in one round trip.
async fn load(pool: &PgPool, watermark: Option<DateTime<Utc>>) -> Result<WorldChanges, StoreError> {
    let mut connection = pool.acquire().await?;
    knowledge::load_world_changes(&mut connection, watermark).await
}

/// A copy the world took in while its insert ran.
#[derive(Debug, Clone, Copy)]
struct Taken {
    holder: Uuid,
    fact_id: Uuid,
    origin: Uuid,
}

/// A tick's exchanges, ready to commit.
struct PlannedWrite {
    facts: Vec<NewFact>,
    /// Facts whose claim keys match something their listener holds: checked in Postgres.
    suspects: HashSet<Uuid>,
    near_cap: Vec<Uuid>,
    /// The watermark the plan's memory was loaded at.
    loaded_since: DateTime<Utc>,
    now: DateTime<Utc>,
}

/// Commits a tick's exchanges with their outbox rows (nothing to do without exchanges).
/// An all-or-nothing insert's facts go into `world` while Postgres stores them (noted in
/// `taken_in`): that work is off the tick's critical path.
async fn write_planned(
    connection: &mut PgConnection,
    topology: &Topology,
    write: PlannedWrite,
    world: &mut World,
    taken_in: &mut Option<Vec<Taken>>,
) -> Result<Option<Stored>, StoreError> {
    if write.facts.is_empty() {
        return Ok(None);
    }
    let PlannedWrite { facts, suspects, near_cap, loaded_since, now } = write;
    let secret = |new: &NewFact| secret_learned(topology, new, now);
    // When Postgres is read anyway (suspects, or listeners near the cap), every fact is
    // checked: a write in a transaction then misses no fact the leader has not loaded.
    let check = if suspects.is_empty() && near_cap.is_empty() { Check::Only(&suspects) } else { Check::Every };
    let prepared = prepare_facts(connection, facts, check).await?;
    if prepared.needs_transaction(&near_cap) {
        return write_in_transaction(connection, topology, prepared, &near_cap, &secret).await.map(Some);
    }
    // Usually one statement, atomic by itself: the facts and their outbox rows. The leader
    // plans only exchanges its listeners do not know (as far as it knows).
    let take_in = |facts: &[NewFact]| {
        let taken = facts.iter().map(|new| Taken {
            holder: new.fact.holder,
            fact_id: new.fact.id,
            origin: new.fact.origin_fact_id,
        });
        *taken_in = Some(taken.collect());
        for new in facts {
            world.take_in(new.fact.clone(), now);
        }
    };
    let known = Known::Unlikely { loaded_since };
    let stored = write_facts(connection, topology, prepared, &near_cap, known, &secret, take_in).await?;
    if stored.unchecked.is_empty() {
        return Ok(Some(stored));
    }
    // A listener learned a fact the leader has not loaded, which these copies may
    // contradict: the world gives back what it took in, and the batch is checked against
    // everything its listeners hold and written again.
    for taken in taken_in.take().into_iter().flatten() {
        world.take_back(taken);
    }
    let prepared = prepare_facts(connection, stored.unchecked, Check::Every).await?;
    let stored = write_in_transaction(connection, topology, prepared, &near_cap, &secret).await?;
    Ok(Some(Stored { rechecked: true, ..stored }))
}

/// Writes prepared facts, their revisions and the cap in one transaction.
async fn write_in_transaction(
    connection: &mut PgConnection,
    topology: &Topology,
    prepared: crate::learn::Prepared,
    near_cap: &[Uuid],
    secret: &impl Fn(&NewFact) -> Option<OutboxMessage>,
) -> Result<Stored, StoreError> {
    let mut transaction = sqlx::Connection::begin(connection).await?;
    let stored = write_facts(&mut transaction, topology, prepared, near_cap, Known::Possible, secret, |_| {}).await?;
    transaction.commit().await?;
    Ok(stored)
}

/// A 64-bit fingerprint of (holder, origin fact), by a fixed-seed quality hash, so ids
/// with structure (sequential, time-ordered) spread like random ones. Two pairs sharing a
/// fingerprint (by the birthday bound, odds about 1 in 10^9 for 275,000 pairs) would only make the
/// leader pass over telling that listener that fact; Postgres's unique key, not this set,
/// stops a fact from being learned twice.
fn known_key(holder: Uuid, origin: Uuid) -> u64 {
    static STATE: foldhash::quality::FixedState = foldhash::quality::FixedState::with_seed(0x6E70_636D_656D);
    STATE.hash_one((holder.as_u128(), origin.as_u128()))
}

/// A claim key of one holder's.
fn holder_key(holder: Uuid, key: u64) -> u64 {
    let folded = holder.as_u128();
    key ^ (folded as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((folded >> 64) as u64).rotate_left(29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_unlearn_once_and_refused_copies_are_not_told_again() {
        use npcmem_core::wire::KnowledgeCategory;
        let mut world = World::default();
        let (holder, origin, now) = (Uuid::now_v7(), Uuid::now_v7(), Utc::now());
        let fact = HeldFact {
            id: origin,
            origin_fact_id: origin,
            holder,
            category: KnowledgeCategory::WorldEvent,
            subject_id: None,
            content: "The well ran dry".into(),
            tags: vec![],
            confidence: 1.0,
            importance: 0.9,
            hop_count: 0,
            provenance: vec![],
            expires_at: None,
            perspective: None,
        };
        world.take_in(fact.clone(), now);
        world.note_known(holder, Uuid::now_v7());
        assert_eq!((world.held[&holder], world.size().spreadable_facts), (2, 1));
        // A deletion a refresh reads twice counts once.
        let gone = ForgottenFact { holder, fact_id: origin, origin_fact_id: origin };
        world.unlearn(gone);
        world.unlearn(gone);
        assert_eq!((world.held[&holder], world.size().spreadable_facts), (1, 0));
        assert!(!world.not_to_tell(holder, origin), "it may be told again");
        world.take_in(fact, now);
        assert_eq!(world.held[&holder], 2, "learned again");
        // A copy the cap dropped at once stays refused after its deletion is loaded.
        let dropped = Uuid::now_v7();
        world.note_refused(holder, dropped);
        world.unlearn(ForgottenFact { holder, fact_id: Uuid::now_v7(), origin_fact_id: dropped });
        assert_eq!(world.held[&holder], 2);
        assert!(world.not_to_tell(holder, dropped));
    }

    #[test]
    fn structured_ids_get_distinct_known_keys() {
        // Sequential ids, as a game might derive them, both ways round.
        let ids: Vec<Uuid> = (0..400u128).map(Uuid::from_u128).collect();
        let mut keys = HashSet::default();
        for holder in &ids {
            for origin in &ids {
                assert!(keys.insert(known_key(*holder, *origin)), "{holder} {origin}");
            }
        }
        assert_eq!(keys.len(), 160_000);
    }
}
