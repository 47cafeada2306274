//! The gossip tick (seed `GossipSystem.update`): one leader replica keeps the world in
//! memory — rooms, drives, spreadable facts, who knows what — refreshed from Postgres
//! each tick with what changed, and spends the tick's budget on the pre-computed queue
//! of co-located pairs. A tick's exchanges commit together with their outbox rows, so a
//! crash loses only exchanges that never happened.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use npcmem_bus::Topology;
use npcmem_core::gossip::{Drives, GossipQueue, HeldFact, propagate, select};
use npcmem_core::wire::{CacheInvalidate, SCHEMA_VERSION, Signal, signal_type};
use npcmem_store::knowledge::{self, NewFact, Source};
use npcmem_store::outbox::{self, OutboxMessage};
use npcmem_store::{PgPool, StoreError, switches};
use uuid::Uuid;

use crate::learn::store_facts;

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TickReport {
    pub exchanges: usize,
    pub pairs_tried: usize,
    pub rebuilt_pairs: usize,
    pub duration: Duration,
    /// Of `duration`: reloading changes, and the commit of the exchanges.
    pub refresh: Duration,
    pub commit: Duration,
    pub skipped: bool,
}

/// The leader's view of the world.
pub struct World {
    pub queue: GossipQueue,
    facts: HashMap<Uuid, Vec<HeldFact>>,
    known: HashSet<(Uuid, Uuid)>,
    /// Facts each NPC holds, as far as this leader knows: the cap is only checked in SQL
    /// for holders near it.
    held: HashMap<Uuid, usize>,
    drives: HashMap<Uuid, Drives>,
    /// Changes older than this are in memory already.
    watermark: DateTime<Utc>,
}

/// How far back each refresh looks again: a row committed late with an earlier
/// `created_at` (its transaction's start) is still picked up; duplicates are ignored.
/// Refreshes after the first skip the facts gossip wrote itself: they are in memory.
const REFRESH_OVERLAP: TimeDelta = TimeDelta::seconds(30);

impl Default for World {
    fn default() -> Self {
        Self {
            queue: GossipQueue::default(),
            facts: HashMap::new(),
            known: HashSet::new(),
            held: HashMap::new(),
            drives: HashMap::new(),
            watermark: DateTime::<Utc>::UNIX_EPOCH,
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
}

impl Ticker {
    pub fn new(pool: PgPool, topology: Topology, nats: Option<async_nats::Client>, budget: usize) -> Self {
        Self { pool, topology, nats, budget, world: World::default(), last_switch_check: None, enabled: true }
    }

    /// Loads what changed since the last refresh.
    pub async fn refresh(&mut self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let full = self.world.watermark == DateTime::<Utc>::UNIX_EPOCH;
        let since = if full { DateTime::<Utc>::UNIX_EPOCH } else { self.world.watermark - REFRESH_OVERLAP };
        // Four small reads at once, each on its own connection: a tick waits for the slowest.
        let pool = &self.pool;
        let (locations, drives, known, facts) = tokio::try_join!(
            async { knowledge::load_locations(&mut *pool.acquire().await?, since).await },
            async { knowledge::load_drives(&mut *pool.acquire().await?, since).await },
            async { knowledge::load_known(&mut *pool.acquire().await?, since, !full).await },
            async { knowledge::load_spreadable(&mut *pool.acquire().await?, since, now, !full).await },
        )?;
        for (npc, room) in locations {
            self.world.queue.moved(npc, &room);
        }
        for (npc, drives) in drives {
            self.world.drives.insert(npc, drives);
        }
        for (holder, origin) in known {
            self.note_known(holder, origin);
        }
        for fact in facts {
            self.add_fact(fact, now);
        }
        self.world.watermark = now;
        Ok(())
    }

    fn add_fact(&mut self, fact: HeldFact, now: DateTime<Utc>) {
        self.note_known(fact.holder, fact.origin_fact_id);
        if !fact.gossip_worthy(now) {
            return;
        }
        let held = self.world.facts.entry(fact.holder).or_default();
        if held.iter().any(|h| h.origin_fact_id == fact.origin_fact_id) {
            return;
        }
        let holder = fact.holder;
        held.push(fact);
        self.world.queue.set_talker(holder, true);
    }

    fn note_known(&mut self, holder: Uuid, origin: Uuid) {
        if self.world.known.insert((holder, origin)) {
            *self.world.held.entry(holder).or_default() += 1;
        }
    }

    /// Gossip and degraded mode are runtime switches (DESIGN §3), read at most once a second.
    async fn gossip_enabled(&mut self) -> Result<bool, StoreError> {
        if self.last_switch_check.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return Ok(self.enabled);
        }
        let mut connection = self.pool.acquire().await?;
        let values = switches::load_all(&mut connection).await?;
        let flag = |name: &str, default: bool| values.get(name).and_then(serde_json::Value::as_bool).unwrap_or(default);
        self.enabled = flag("gossip_enabled", true) && !flag("degraded", false);
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
        let refresh_started = Instant::now();
        self.refresh(now).await?;
        let refresh = refresh_started.elapsed();
        let rebuilt_pairs = if self.world.queue.is_dirty() { self.world.queue.rebuild() } else { 0 };
        let mut exchanges: Vec<(HeldFact, Uuid)> = Vec::new();
        let mut planned: HashSet<(Uuid, Uuid)> = HashSet::new();
        let mut pairs_tried = 0;
        let mut requeue = Vec::new();
        // A pair without anything to say is dropped; give up after many such pairs so a
        // tick stays O(budget) even when the queue holds little of value.
        while exchanges.len() < self.budget && pairs_tried < self.budget * 20 {
            let Some((speaker, listener)) = self.world.queue.next_pair() else { break };
            pairs_tried += 1;
            let Some(candidates) = self.world.facts.get(&speaker) else { continue };
            let drives = self.world.drives.get(&speaker).copied().unwrap_or_default();
            let known = &self.world.known;
            let chosen = select(
                candidates,
                listener,
                &drives,
                |origin| known.contains(&(listener, origin)) || planned.contains(&(listener, origin)),
                now,
            );
            if let Some(fact) = chosen {
                planned.insert((listener, fact.origin_fact_id));
                exchanges.push((propagate(fact, speaker, listener, Uuid::new_v4()), speaker));
                requeue.push((speaker, listener));
            }
        }
        for (speaker, listener) in requeue {
            self.world.queue.requeue(speaker, listener);
        }
        let commit_started = Instant::now();
        if !exchanges.is_empty() {
            self.commit(exchanges, now).await?;
        }
        let commit = commit_started.elapsed();
        Ok(TickReport {
            exchanges: planned.len(),
            pairs_tried,
            rebuilt_pairs,
            duration: started.elapsed(),
            refresh,
            commit,
            skipped: false,
        })
    }

    async fn commit(&mut self, exchanges: Vec<(HeldFact, Uuid)>, now: DateTime<Utc>) -> Result<(), StoreError> {
        let facts: Vec<NewFact> = exchanges
            .into_iter()
            .map(|(fact, speaker)| NewFact {
                fact,
                source: Source::Gossip,
                source_memory_id: None,
                speaker_id: Some(speaker),
            })
            .collect();
        let near_cap: Vec<Uuid> = facts
            .iter()
            .map(|new| new.fact.holder)
            .filter(|holder| {
                self.world.held.get(holder).copied().unwrap_or(0) + 1 >= npcmem_core::gossip::MAX_FACTS_PER_NPC
            })
            .collect();
        let mut transaction = self.pool.begin().await?;
        let stored = store_facts(&mut transaction, &self.topology, facts, &near_cap).await?;
        let secrets: Vec<OutboxMessage> = stored
            .iter()
            .filter(|new| new.fact.is_secret())
            .map(|new| secret_learned(&self.topology, &new.fact, new.speaker_id, now))
            .collect();
        outbox::enqueue(&mut transaction, &secrets).await?;
        transaction.commit().await?;
        let mut listeners = HashSet::new();
        for new in stored {
            listeners.insert(new.fact.holder);
            self.add_fact(new.fact, now);
        }
        if let Some(nats) = &self.nats {
            let messages: Vec<CacheInvalidate> = listeners
                .into_iter()
                .map(|listener| CacheInvalidate { npc_id: Some(listener), player_id: None })
                .collect();
            npcmem_bus::publish::invalidate_caches(nats, &self.topology, &messages).await;
        }
        Ok(())
    }
}

/// `signal.secret_learned` for a secret reaching a new NPC.
fn secret_learned(topology: &Topology, fact: &HeldFact, speaker: Option<Uuid>, now: DateTime<Utc>) -> OutboxMessage {
    let mut extra = serde_json::Map::new();
    extra.insert("fact_id".into(), fact.id.to_string().into());
    extra.insert("origin_fact_id".into(), fact.origin_fact_id.to_string().into());
    extra.insert("content".into(), fact.content.clone().into());
    extra.insert("hop_count".into(), fact.hop_count.into());
    if let Some(speaker) = speaker {
        extra.insert("from_npc_id".into(), speaker.to_string().into());
    }
    let signal = Signal {
        schema_version: SCHEMA_VERSION,
        // One per (listener, origin): a replayed tick cannot emit it twice.
        signal_id: crate::learn::derive_id(fact.origin_fact_id, fact.holder),
        signal_type: signal_type::SECRET_LEARNED.to_owned(),
        event_type: None,
        npc_id: fact.holder,
        player_id: fact.subject_id,
        dimension: None,
        old_value: None,
        new_value: Some(fact.confidence),
        stage: None,
        conversation_id: None,
        version: None,
        at: now,
        extra,
    };
    OutboxMessage {
        subject: topology.signal(signal_type::SECRET_LEARNED),
        msg_id: Some(signal.signal_id.to_string()),
        payload: serde_json::to_vec(&signal).expect("signals serialise"),
        headers: Default::default(),
    }
}
