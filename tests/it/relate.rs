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
