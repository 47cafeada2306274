//! The relate service against real NATS and Postgres. Events are published as extract
//! publishes them (`P.event.memory.stored`), so each test controls the memories exactly.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use npcmem_bus::StreamKind;
use npcmem_core::relationship::{RelateRules, Relationship, apply_conversation};
use npcmem_store::relationships;
use npcmem_tests::fixtures::{self, EventMemory, Pair};
use npcmem_tests::{InProcessService, TestEnv, wait_until};
use serde_json::Value;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

const HELPFUL: EventMemory<'static> =
    EventMemory { tags: &["helpful"], importance: 0.7, valence: "positive", intensity: 0.8 };
const HEROIC: EventMemory<'static> =
    EventMemory { tags: &["helpful", "heroic"], importance: 0.7, valence: "positive", intensity: 1.0 };
const THREAT: EventMemory<'static> =
    EventMemory { tags: &["threat"], importance: 0.7, valence: "negative", intensity: 1.0 };
const BETRAYAL: EventMemory<'static> =
    EventMemory { tags: &["betrayal"], importance: 0.7, valence: "negative", intensity: 1.0 };
const GIFT: EventMemory<'static> =
    EventMemory { tags: &["gift", "helpful"], importance: 0.7, valence: "positive", intensity: 1.0 };

fn day(n: i64) -> DateTime<Utc> {
    Utc::now() - TimeDelta::days(400) + TimeDelta::days(n)
}

async fn publish_event(env: &TestEnv, pair: &Pair, memories: &[EventMemory<'_>], ended_at: DateTime<Utc>) -> Uuid {
    publish_event_with_factions(env, pair, memories, ended_at, &[], &[]).await
}

async fn publish_event_with_factions(
    env: &TestEnv,
    pair: &Pair,
    memories: &[EventMemory<'_>],
    ended_at: DateTime<Utc>,
    npc_factions: &[&str],
    player_factions: &[&str],
) -> Uuid {
    let conversation_id = Uuid::new_v4();
    let event = fixtures::memory_stored(conversation_id, pair, memories, ended_at, npc_factions, player_factions);
    let event_id = event["event_id"].as_str().expect("an event id").to_owned();
    env.publish(&env.subject("event.memory.stored"), fixtures::bytes(&event), Some(&event_id)).await;
    conversation_id
}

async fn wait_applied(env: &TestEnv, expected: i64) {
    wait_until(WAIT, &format!("{expected} conversations applied"), || async {
        env.count("SELECT count(*) FROM applied_conversations").await == expected
    })
    .await;
}

async fn relationship(env: &TestEnv, pair: &Pair) -> Relationship {
    let mut connection = env.pool.acquire().await.expect("a connection");
    relationships::load(&mut connection, &[(pair.npc_id, pair.player_id)])
        .await
        .expect("load runs")
        .pop()
        .expect("the relationship exists")
        .1
}

async fn signals(env: &TestEnv) -> Vec<Value> {
    env.stream_messages(StreamKind::Signals)
        .await
        .iter()
        .map(|message| serde_json::from_slice(&message.payload).expect("signals are JSON"))
        .collect()
}

fn count_of(signals: &[Value], event_type: &str) -> usize {
    signals.iter().filter(|signal| signal["event_type"] == event_type).count()
}

#[tokio::test]
async fn helping_makes_a_friend_threats_bring_fear_and_betrayal_breaks_trust() {
    let env = TestEnv::new().await;
    let relate = env.spawn_relate(&[]);
    let (helped, threatened, betrayed) = (Pair::new(), Pair::new(), Pair::new());
    for n in 0..6 {
        publish_event(&env, &helped, &[HELPFUL], day(n)).await;
    }
    for n in 0..3 {
        publish_event(&env, &threatened, &[THREAT], day(n)).await;
    }
    publish_event(&env, &betrayed, &[BETRAYAL], day(0)).await;
    wait_applied(&env, 10).await;

    let friend = relationship(&env, &helped).await;
    assert!(friend.dims[0] > 0.6 && friend.dims[4] > 0.6, "trust and friendliness rose: {:?}", friend.dims);
    assert_eq!(friend.stage.as_str(), "friend");
    assert_eq!(friend.interaction_count, 6);
    let stages: Vec<String> = signals(&env)
        .await
        .iter()
        .filter(|s| s["npc_id"] == helped.npc_id.to_string() && s["event_type"] == "stage_changed")
        .map(|s| s["stage"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(stages, vec!["acquaintance", "friend"], "stranger → acquaintance → friend");

    let afraid = relationship(&env, &threatened).await;
    assert!(afraid.dims[1] > 0.1 && afraid.dims[0] < 0.5, "fear up, trust down: {:?}", afraid.dims);
    let broken = relationship(&env, &betrayed).await;
    assert!(broken.dims[0] < 0.5 && broken.dims[3] < 0.5 && broken.dims[4] < 0.5, "{:?}", broken.dims);
    for relationship in [friend, afraid, broken] {
        assert!(relationship.dims.iter().all(|v| (0.0..=1.0).contains(v)));
    }
    relate.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_thief_meets_a_hostile_guard_at_lower_trust_without_a_threshold_signal() {
    let env = TestEnv::new().await;
    let factions = std::env::temp_dir().join(format!("factions-{}.toml", env.id));
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/factions.toml"), &factions).unwrap();
    let factions_arg = factions.display().to_string();
    let relate = env.spawn_relate(&["--factions-file", &factions_arg]);
    let (guard_meets_thief, guard_meets_pilgrim) = (Pair::new(), Pair::new());
    publish_event_with_factions(&env, &guard_meets_thief, &[], day(0), &["city_guard"], &["thieves_guild"]).await;
    publish_event_with_factions(&env, &guard_meets_pilgrim, &[], day(0), &["city_guard"], &["temple_of_dawn"]).await;
    wait_applied(&env, 2).await;
    let thief = relationship(&env, &guard_meets_thief).await;
    assert_eq!((thief.dims[0], thief.dims[4]), (0.2, 0.2), "hostile: 0.5 − 0.3");
    let pilgrim = relationship(&env, &guard_meets_pilgrim).await;
    assert_eq!((pilgrim.dims[0], pilgrim.dims[4]), (0.6, 0.6), "friendly: 0.5 + 0.1");
    let fired = signals(&env).await;
    assert!(
        fired.iter().all(|s| s["event_type"] == "stage_changed"),
        "initialisation fires no threshold signal: {fired:?}"
    );
    relate.stop().await;
    std::fs::remove_file(factions).ok();
    env.cleanup().await;
}

#[tokio::test]
async fn three_replicas_racing_on_one_pair_lose_no_update() {
    let env = TestEnv::new().await;
    let replicas: Vec<InProcessService> = (0..3).map(|_| env.spawn_relate(&["--batch-size", "4"])).collect();
    let pair = Pair::new();
    let kinds = [HELPFUL, THREAT, GIFT, BETRAYAL, HEROIC];
    for n in 0..200 {
        let memories = [kinds[n % kinds.len()]];
        let memories: &[EventMemory<'_>] = if n % 7 == 0 { &[] } else { &memories };
        publish_event(&env, &pair, memories, day(n as i64 / 20)).await;
    }
    wait_applied(&env, 200).await;
    for replica in replicas {
        replica.stop().await;
    }
    let stored = relationship(&env, &pair).await;
    let mut connection = env.pool.acquire().await.unwrap();
    let ledger = relationships::ledger(&mut connection, pair.npc_id, pair.player_id).await.unwrap();
    let versions: Vec<i64> = ledger.iter().map(|row| row.version).collect();
    assert_eq!(versions, (1..=200).collect::<Vec<i64>>(), "one version per conversation, no gap");
    let rules = RelateRules::default();
    let mut replayed = Relationship::initial(0.0);
    for row in &ledger {
        replayed = apply_conversation(&replayed, &row.deltas, row.memory_count, row.ended_at, &rules).after;
    }
    assert_eq!(replayed, stored, "the stored values are the ledger replayed in order, to the last bit");
    assert_eq!(stored.interaction_count, 200);
    drop(connection);
    env.cleanup().await;
}

#[tokio::test]
async fn a_hundred_gifts_in_a_day_move_each_dimension_at_most_the_farming_cap() {
    let env = TestEnv::new().await;
    let relate = env.spawn_relate(&[]);
    let pair = Pair::new();
    let today = Utc::now();
    for _ in 0..100 {
        publish_event(&env, &pair, &[GIFT], today).await;
    }
    wait_applied(&env, 100).await;
    let gifted = relationship(&env, &pair).await;
    let initial = Relationship::initial(0.0);
    for (index, (after, before)) in gifted.dims.iter().zip(initial.dims).enumerate() {
        assert!(after - before <= 0.2 + 1e-9, "dimension {index} moved {}", after - before);
    }
    assert_eq!(gifted.dims[4], 0.7, "friendliness reached exactly the cap");
    assert_eq!(gifted.interaction_count, 100);
    relate.stop().await;
    env.cleanup().await;
}

/// A game server's durable consumer on `P.signal.>` sees npc_hostile once when trust
/// falls below 0.2 and npc_trusted_ally once when it rises above 0.8; the faction
/// standing and memory milestones arrive on the same subscription.
#[tokio::test]
async fn a_game_server_subscriber_receives_hostile_and_trusted_ally_once_each() {
    use async_nats::jetstream::consumer::{self, pull};
    use futures::StreamExt;
    let env = TestEnv::new().await;
    let pair = Pair::new();
    let factions = std::env::temp_dir().join(format!("factions-{}.toml", env.id));
    std::fs::write(
        &factions,
        format!(
            "[[faction]]\nid = \"city_guard\"\nname = \"Guard\"\n[[npc]]\nid = \"{}\"\nfactions = [\"city_guard\"]\n",
            pair.npc_id
        ),
    )
    .unwrap();
    let factions_arg = factions.display().to_string();
    let relate = env.spawn_relate(&["--factions-file", &factions_arg]);
    let stream = env.js.get_stream(env.topology.stream_name(StreamKind::Signals)).await.unwrap();
    let game_server: consumer::Consumer<pull::Config> = stream
        .create_consumer(pull::Config {
            durable_name: Some(format!("game-server-{}", env.id)),
            filter_subject: env.subject("signal.>"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut n = 0;
    for _ in 0..6 {
        publish_event_with_factions(&env, &pair, &[THREAT], day(n), &["city_guard"], &[]).await;
        n += 1;
    }
    // Relate applies conversations in delivery order: a threat redelivered after the
    // gifts (a retried batch on a loaded machine) would end the story lower, so the
    // threats land first.
    wait_applied(&env, 6).await;
    for _ in 0..12 {
        publish_event_with_factions(&env, &pair, &[HEROIC, GIFT], day(n), &["city_guard"], &[]).await;
        n += 1;
    }
    wait_applied(&env, 18).await;
    let final_state = relationship(&env, &pair).await;
    assert!(final_state.dims[0] > 0.8, "trust recovered: {:?}", final_state.dims);

    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let mut batch =
            game_server.fetch().max_messages(100).expires(Duration::from_millis(500)).messages().await.unwrap();
        while let Some(Ok(message)) = batch.next().await {
            message.ack().await.unwrap();
            received.push(serde_json::from_slice::<Value>(&message.payload).unwrap());
        }
        if count_of(&received, "npc_trusted_ally") > 0
            && received.iter().any(|s| s["signal_type"] == "memory_milestone")
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut rest =
                game_server.fetch().max_messages(100).expires(Duration::from_millis(500)).messages().await.unwrap();
            while let Some(Ok(message)) = rest.next().await {
                message.ack().await.unwrap();
                received.push(serde_json::from_slice::<Value>(&message.payload).unwrap());
            }
            break;
        }
    }
    assert_eq!(count_of(&received, "npc_hostile"), 1, "{received:#?}");
    assert_eq!(count_of(&received, "npc_trusted_ally"), 1);
    let hostile = received.iter().find(|s| s["event_type"] == "npc_hostile").unwrap();
    assert_eq!(hostile["dimension"], "trust");
    assert!(hostile["new_value"].as_f64().unwrap() < 0.2 && hostile["old_value"].as_f64().unwrap() >= 0.2);
    assert!(hostile["version"].as_i64().unwrap() > 0);
    // 6 + 24 memories: milestones at 10, 20 and 30.
    assert_eq!(received.iter().filter(|s| s["signal_type"] == "memory_milestone").count(), 3);
    let shifts: Vec<&Value> = received.iter().filter(|s| s["signal_type"] == "faction_reputation_shift").collect();
    assert!(!shifts.is_empty(), "the guard's opinion of the player crossed a level");
    assert!(shifts.iter().all(|s| s["faction"] == "city_guard"));
    let mut ids: Vec<&str> = received.iter().map(|s| s["signal_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), received.len(), "each signal once");
    relate.stop().await;
    std::fs::remove_file(factions).ok();
    env.cleanup().await;
}

#[tokio::test]
async fn a_redelivered_event_and_a_crash_apply_each_delta_and_publish_each_signal_once() {
    let env = TestEnv::new().await;
    let pairs: Vec<Pair> = (0..20).map(|_| Pair::new()).collect();
    let mut events = Vec::new();
    for round in 0..15 {
        for pair in &pairs {
            let memories = if round < 8 { [THREAT] } else { [HEROIC] };
            let event = fixtures::memory_stored(Uuid::new_v4(), pair, &memories, day(round), &[], &[]);
            events.push(event);
        }
    }
    for event in &events {
        let event_id = event["event_id"].as_str().unwrap().to_owned();
        env.publish(&env.subject("event.memory.stored"), fixtures::bytes(event), Some(&event_id)).await;
    }
    // The first 20 again, as a new message (past the dedup window): applied once anyway.
    for event in &events[..20] {
        env.publish(&env.subject("event.memory.stored"), fixtures::bytes(event), Some(&Uuid::new_v4().to_string()))
            .await;
    }
    let binary = env!("CARGO_BIN_EXE_it-npcmem-relate");
    let first = npcmem_tests::process::ServiceProcess::spawn(binary, &env.common_args());
    wait_until(WAIT, "relate under way", || async {
        env.count("SELECT count(*) FROM applied_conversations").await > 20
    })
    .await;
    first.kill().await;
    eprintln!("applied when killed: {}", env.count("SELECT count(*) FROM applied_conversations").await);
    let second = npcmem_tests::process::ServiceProcess::spawn(binary, &env.common_args());
    wait_applied(&env, 300).await;
    wait_until(WAIT, "outbox drained", || async { env.count("SELECT count(*) FROM outbox").await == 0 }).await;
    assert!(second.terminate().await.success());
    for pair in &pairs {
        assert_eq!(relationship(&env, pair).await.interaction_count, 15, "each conversation counted once");
    }
    let fired = signals(&env).await;
    let mut ids: Vec<&str> = fired.iter().map(|s| s["signal_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), fired.len(), "no signal published twice");
    // Redelivery after the kill may apply a pair's conversations in another order than
    // they were published; whatever the order, the signals must be exactly those of the
    // ledger's order, each once.
    let rules = RelateRules::default();
    let mut connection = env.pool.acquire().await.unwrap();
    for pair in &pairs {
        let ledger = relationships::ledger(&mut connection, pair.npc_id, pair.player_id).await.unwrap();
        let mut state = Relationship::initial(0.0);
        let mut expected: Vec<String> = Vec::new();
        for row in &ledger {
            let applied = apply_conversation(&state, &row.deltas, row.memory_count, row.ended_at, &rules);
            expected.extend(applied.crossings.iter().map(|c| c.event_type.clone()));
            expected.extend(applied.stage_change.map(|_| "stage_changed".to_owned()));
            expected.extend(applied.milestone.map(|_| "memory_milestone".to_owned()));
            state = applied.after;
        }
        let mut actual: Vec<String> = fired
            .iter()
            .filter(|s| s["npc_id"] == pair.npc_id.to_string())
            .map(|s| s["event_type"].as_str().map_or("memory_milestone".to_owned(), str::to_owned))
            .collect();
        expected.sort();
        actual.sort();
        assert_eq!(actual, expected, "the pair's signals are its ledger's, once each");
    }
    drop(connection);
    let relationship_events = env
        .stream_messages(StreamKind::Events)
        .await
        .iter()
        .filter(|m| m.subject.as_str() == env.subject("event.relationship.changed"))
        .count();
    assert_eq!(relationship_events, 300, "one event.relationship.changed per applied conversation");
    env.cleanup().await;
}

#[tokio::test]
async fn bad_rules_are_refused_at_start_with_a_clear_message() {
    let env = TestEnv::new().await;
    let cases = [
        ("[tags.helpful]\ncourage = 0.1\n", "unknown variant `courage`"),
        ("[tags.helpful]\ntrust = 1.5\n", "tags.helpful.trust: magnitude 1.5 is outside [-1, 1]"),
    ];
    for (index, (rules, expected)) in cases.iter().enumerate() {
        let path = std::env::temp_dir().join(format!("relate-rules-{}-{index}.toml", env.id));
        std::fs::write(&path, rules).unwrap();
        let path_arg = path.display().to_string();
        let config = env.relate_config(&["--relate-rules", &path_arg]);
        let error = npcmem_relate::run(config, npcmem_service::Shutdown::new()).await.expect_err("refused");
        let message = error.to_string();
        assert!(message.contains(expected) && message.contains("NPCMEM_RELATE_RULES"), "{message}");
        std::fs::remove_file(path).ok();
    }
    env.cleanup().await;
}

#[tokio::test]
async fn loading_the_example_factions_twice_changes_nothing() {
    use npcmem_core::relationship::factions::FactionsFile;
    let env = TestEnv::new().await;
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/factions.toml")).unwrap();
    let file = FactionsFile::from_toml(&text).expect("the example is valid");
    let snapshot = || async {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT faction, toward, attitude FROM faction_attitudes ORDER BY 1, 2")
                .fetch_all(&env.pool)
                .await
                .unwrap();
        let factions: Vec<(String, String, String)> =
            sqlx::query_as("SELECT faction, name, updated_at::text FROM factions ORDER BY 1")
                .fetch_all(&env.pool)
                .await
                .unwrap();
        (rows, factions, env.count("SELECT count(*) FROM npc_factions").await)
    };
    for _ in 0..2 {
        let mut transaction = env.pool.begin().await.unwrap();
        let loaded = relationships::load_factions_file(&mut transaction, &file).await.unwrap();
        transaction.commit().await.unwrap();
        assert_eq!((loaded.factions, loaded.npcs), (5, 2));
    }
    let first = snapshot().await;
    let mut transaction = env.pool.begin().await.unwrap();
    relationships::load_factions_file(&mut transaction, &file).await.unwrap();
    transaction.commit().await.unwrap();
    assert_eq!(snapshot().await, first, "the same file again changes nothing");
    assert!(first.0.contains(&("city_guard".into(), "thieves_guild".into(), "hostile".into())));
    env.cleanup().await;
}

#[tokio::test]
async fn a_malformed_event_is_dead_lettered_and_the_next_one_applied() {
    let env = TestEnv::new().await;
    let relate = env.spawn_relate(&[]);
    env.publish(&env.subject("event.memory.stored"), b"{\"schema_version\":1,\"npc_id\":".to_vec(), None).await;
    let bad_uuid = serde_json::json!({"schema_version": 1, "event_id": "x", "conversation_id": "nope"});
    env.publish(&env.subject("event.memory.stored"), fixtures::bytes(&bad_uuid), None).await;
    let pair = Pair::new();
    publish_event(&env, &pair, &[HELPFUL], day(0)).await;
    wait_applied(&env, 1).await;
    wait_until(WAIT, "two dead letters", || async { env.stream_messages(StreamKind::Dlq).await.len() == 2 }).await;
    let letters = env.stream_messages(StreamKind::Dlq).await;
    assert!(letters.iter().all(|l| l.subject.as_str() == env.subject("dlq.relate")));
    let reason = |letter: &async_nats::jetstream::message::StreamMessage| {
        letter.headers.get("Npcmem-Dlq-Reason").map(|v| v.as_str().to_owned()).unwrap_or_default()
    };
    let mut reasons: Vec<String> = letters.iter().map(reason).collect();
    reasons.sort();
    assert_eq!(reasons, vec!["invalid_json", "invalid_uuid"]);
    let truncated = letters.iter().find(|l| reason(l) == "invalid_json").expect("the truncated one");
    assert_eq!(&truncated.payload[..], b"{\"schema_version\":1,\"npc_id\":", "the original bytes");
    relate.stop().await;
    env.cleanup().await;
}

/// A factions file's worth of memberships, loaded once the way relate loads one.
async fn load_factions(env: &TestEnv, npcs: &[(Uuid, &[&str])]) {
    use npcmem_core::relationship::factions::FactionsFile;
    let mut text = String::new();
    let mut named: Vec<&str> = npcs.iter().flat_map(|(_, factions)| factions.iter().copied()).collect();
    named.sort_unstable();
    named.dedup();
    for faction in named {
        text.push_str(&format!("[[faction]]\nid = \"{faction}\"\nname = \"{faction}\"\n"));
    }
    for (npc, factions) in npcs {
        text.push_str(&format!("[[npc]]\nid = \"{npc}\"\nfactions = {factions:?}\n"));
    }
    let file = FactionsFile::from_toml(&text).expect("a valid factions file");
    let mut transaction = env.pool.begin().await.unwrap();
    relationships::load_factions_file(&mut transaction, &file).await.unwrap();
    transaction.commit().await.unwrap();
}

/// two batches in flight both read smiths_guild at 0.0 and both announced the
/// fall below −0.25, with different signal ids. Three replicas, batches of 2 and every
/// NPC of two factions threatening four players at once: each level is announced once
/// per (faction, player) — exactly the crossings from 0 to the final reputation — and
/// no signal id twice.
#[tokio::test]
async fn three_replicas_in_flight_on_shared_factions_announce_each_reputation_crossing_once() {
    let env = TestEnv::new().await;
    let npcs: Vec<Uuid> = (0..8).map(|_| Uuid::new_v4()).collect();
    let players: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let factions_of = |index: usize| -> &'static [&'static str] {
        if index < 4 { &["smiths_guild", "city_guard"] } else { &["smiths_guild"] }
    };
    let memberships: Vec<(Uuid, &[&str])> = npcs.iter().enumerate().map(|(i, npc)| (*npc, factions_of(i))).collect();
    load_factions(&env, &memberships).await;
    let replicas: Vec<InProcessService> = (0..3).map(|_| env.spawn_relate(&["--batch-size", "2"])).collect();

    // Round by round every NPC's disposition takes the same step down, so each faction's
    // mean only falls and each level is crossed at most once: any second announcement is
    // a duplicate.
    const ROUNDS: usize = 4;
    for round in 0..ROUNDS {
        let mut events = Vec::new();
        for (index, npc) in npcs.iter().enumerate() {
            for player in &players {
                let pair = Pair { npc_id: *npc, player_id: *player };
                let event = fixtures::memory_stored(
                    Uuid::new_v4(),
                    &pair,
                    &[THREAT],
                    day(round as i64),
                    factions_of(index),
                    &[],
                );
                events.push(event);
            }
        }
        // Shuffled, so each batch mixes NPCs and players of the same factions.
        events.sort_by_key(|event| event["event_id"].as_str().unwrap_or_default().to_owned());
        for event in &events {
            let event_id = event["event_id"].as_str().unwrap().to_owned();
            env.publish(&env.subject("event.memory.stored"), fixtures::bytes(event), Some(&event_id)).await;
        }
        wait_applied(&env, ((round + 1) * npcs.len() * players.len()) as i64).await;
    }
    wait_until(WAIT, "outbox drained", || async { env.count("SELECT count(*) FROM outbox").await == 0 }).await;
    for replica in replicas {
        replica.stop().await;
    }

    let fired = signals(&env).await;
    let mut ids: Vec<&str> = fired.iter().map(|s| s["signal_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), fired.len(), "no signal id twice");

    let finals: Vec<(String, Uuid, f64)> =
        sqlx::query_as("SELECT faction, player_id, reputation FROM faction_reputation ORDER BY 1, 2")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(finals.len(), 2 * players.len(), "two factions × four players");
    let levels = RelateRules::default().reputation_levels;
    let mut announced = 0;
    for (faction, player, reputation) in &finals {
        assert!(*reputation < -0.25, "the threats took {faction} below −0.25: {reputation}");
        let expected: Vec<(f64, &str)> = npcmem_core::relationship::reputation_crossings(0.0, *reputation, &levels)
            .into_iter()
            .map(|(level, upward)| (level, if upward { "reputation_up" } else { "reputation_down" }))
            .collect();
        let mut actual: Vec<(f64, &str)> = fired
            .iter()
            .filter(|s| s["signal_type"] == "faction_reputation_shift")
            .filter(|s| s["faction"] == faction.as_str() && s["player_id"] == player.to_string())
            .map(|s| (s["level"].as_f64().unwrap(), s["event_type"].as_str().unwrap()))
            .collect();
        actual.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(actual, expected, "{faction} for {player}: each level crossed once, announced once");
        announced += actual.len();
    }
    eprintln!("reputation crossings announced: {announced}");
    env.cleanup().await;
}

/// The race of two batches held open: two transactions each sour one smith's relationship
/// with the player and recompute the guild's reputation. The second waits for the
/// first's reputation lock, then reads what it wrote, so only the first sees the fall
/// below −0.25 (before, both read "no reputation yet" and both announced it).
#[tokio::test]
async fn the_second_of_two_racing_recomputations_reads_what_the_first_wrote() {
    use npcmem_core::relationship::{disposition, reputation_crossings};
    let env = TestEnv::new().await;
    let player = Uuid::new_v4();
    let (brom, hilda) = (Uuid::new_v4(), Uuid::new_v4());
    load_factions(&env, &[(brom, &["smiths_guild"]), (hilda, &["smiths_guild"])]).await;
    let mut soured = Relationship::initial(0.0);
    soured.dims[0] = 0.2;
    soured.dims[4] = 0.2;
    soured.disposition = disposition(&soured.dims);
    soured.interaction_count = 1;
    soured.version = 1;
    let keys = vec![("smiths_guild".to_owned(), player)];

    let mut first = env.pool.begin().await.unwrap();
    let brom_write =
        relationships::Write { npc_id: brom, player_id: player, relationship: &soured, read_version: None };
    relationships::write(&mut first, &[brom_write]).await.unwrap();
    let first_change = relationships::recompute_reputation(&mut first, &keys).await.unwrap();

    let mut second = env.pool.begin().await.unwrap();
    let hilda_write =
        relationships::Write { npc_id: hilda, player_id: player, relationship: &soured, read_version: None };
    relationships::write(&mut second, &[hilda_write]).await.unwrap();
    let racing = tokio::spawn(async move {
        let change = relationships::recompute_reputation(&mut second, &keys).await;
        second.commit().await.unwrap();
        change
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racing.is_finished(), "the second recomputation waits for the first transaction");
    first.commit().await.unwrap();
    let second_change = racing.await.unwrap().unwrap();

    let levels = RelateRules::default().reputation_levels;
    let soured_to = soured.disposition;
    assert!(soured_to < -0.25, "{soured_to}");
    let first_change = &first_change[0];
    assert_eq!((first_change.old, first_change.new, first_change.version), (None, soured_to, 1));
    assert_eq!(reputation_crossings(0.0, first_change.new, &levels), vec![(-0.25, false)]);
    let second_change = &second_change[0];
    assert_eq!(
        (second_change.old, second_change.new, second_change.npcs_known, second_change.version),
        (Some(soured_to), soured_to, 2, 2),
        "the second read the first's reputation and both smiths"
    );
    assert!(reputation_crossings(soured_to, second_change.new, &levels).is_empty());
    env.cleanup().await;
}

/// Signals and `event.relationship.changed` as published, `at` (the clock) left out.
async fn published_ids(env: &TestEnv) -> Vec<(String, String, Value)> {
    let mut published = Vec::new();
    for kind in [StreamKind::Signals, StreamKind::Events] {
        for message in env.stream_messages(kind).await {
            if kind == StreamKind::Events && message.subject.as_str() != env.subject("event.relationship.changed") {
                continue;
            }
            let msg_id = message.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()).unwrap_or_default();
            let mut payload: Value = serde_json::from_slice(&message.payload).unwrap();
            payload.as_object_mut().unwrap().remove("at");
            published.push((message.subject.to_string(), msg_id, payload));
        }
    }
    published.sort_by(|a, b| a.1.cmp(&b.1));
    published
}

/// A recomputation of the same history (relate's tables restored to before it, the same
/// conversations delivered again as new messages) derives every signal and event id
/// again: the republished messages are the same, and JetStream drops them as duplicates.
#[tokio::test]
async fn recomputing_the_same_history_republishes_the_same_ids_and_jetstream_drops_them() {
    use futures::StreamExt;
    let env = TestEnv::new().await;
    let player = Uuid::new_v4();
    let guards: Vec<Uuid> = (0..2).map(|_| Uuid::new_v4()).collect();
    let memberships: Vec<(Uuid, &[&str])> = guards.iter().map(|guard| (*guard, &["city_guard"][..])).collect();
    load_factions(&env, &memberships).await;
    let mut events = Vec::new();
    for n in 0..6 {
        for guard in &guards {
            let pair = Pair { npc_id: *guard, player_id: player };
            events.push(fixtures::memory_stored(
                Uuid::new_v4(),
                &pair,
                &[THREAT, BETRAYAL],
                day(n),
                &["city_guard"],
                &[],
            ));
        }
    }
    // One batch of one at a time: a reputation's version counts its writes, so the same
    // history must reach it in the same transactions for the versions to repeat.
    let relate_args = ["--batch-size", "1", "--consumer-concurrency", "1"];
    let run_history = || async {
        let relate = env.spawn_relate(&relate_args);
        for event in &events {
            // A new message each time: the dedup window would drop the same message id.
            env.publish(&env.subject("event.memory.stored"), fixtures::bytes(event), None).await;
        }
        wait_applied(&env, events.len() as i64).await;
        wait_until(WAIT, "outbox drained", || async { env.count("SELECT count(*) FROM outbox").await == 0 }).await;
        relate.stop().await;
    };

    run_history().await;
    let first = published_ids(&env).await;
    for kind in ["npc_hostile", "stage_changed", "reputation_down"] {
        assert!(first.iter().any(|(_, _, payload)| payload["event_type"] == kind), "the history fires {kind}");
    }
    assert!(first.iter().any(|(_, _, payload)| payload["signal_type"] == "memory_milestone"));
    for (_, msg_id, payload) in &first {
        let id = payload.get("signal_id").or_else(|| payload.get("event_id")).unwrap();
        assert_eq!(id, msg_id.as_str(), "Nats-Msg-Id is the signal or event id");
    }

    // Restored to before the history; a core subscriber sees what is published even when
    // the stream keeps it out as a duplicate.
    for table in ["relationships", "applied_conversations", "faction_reputation"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}"))).execute(&env.pool).await.unwrap();
    }
    let mut republished = env.nats.subscribe(env.subject("signal.>")).await.unwrap();
    let mut changed = env.nats.subscribe(env.subject("event.relationship.changed")).await.unwrap();
    env.nats.flush().await.unwrap();
    run_history().await;

    let mut again = Vec::new();
    for subscription in [&mut republished, &mut changed] {
        while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(2), subscription.next()).await {
            let msg_id = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("Nats-Msg-Id"))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            let mut payload: Value = serde_json::from_slice(&message.payload).unwrap();
            payload.as_object_mut().unwrap().remove("at");
            again.push((message.subject.to_string(), msg_id, payload));
        }
    }
    again.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(again.len(), first.len(), "as many messages as the first time");
    assert_eq!(again, first, "the same messages under the same ids");
    assert_eq!(published_ids(&env).await, first, "JetStream kept none of them twice");
    env.cleanup().await;
}
