//! `npcmem forget-player`, `opt-out` / `opt-in` and `export` / `import` against the real
//! pipeline: rows that a user could find afterwards, in every table.

use std::time::Duration;

use npcmem_bus::StreamKind;
use npcmem_cli::exit_code;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::cli::npcmem;

const WAIT: Duration = Duration::from_secs(30);

async fn publish_conversation(env: &TestEnv, document: &Value) {
    // A fresh Nats-Msg-Id each time: a republished conversation is not stopped by JetStream.
    let msg_id = Uuid::new_v4().to_string();
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(document), Some(&msg_id)).await;
}

fn threat_conversation(conversation_id: Uuid, pair: &Pair) -> Value {
    fixtures::conversation(
        conversation_id,
        pair,
        &["Give me your gold or I will kill you.", "Guards! Help!", "You will regret this.", "Leave my forge."],
    )
}

/// Every table of the public schema with the number of its rows whose text mentions `needle`.
async fn rows_mentioning(env: &TestEnv, needle: Uuid) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let mut found = Vec::new();
    for table in tables {
        let statement = format!("SELECT count(*) FROM \"{table}\" AS t WHERE strpos(t::text, $1) > 0");
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(statement))
            .bind(needle.to_string())
            .fetch_one(&env.pool)
            .await
            .unwrap();
        found.push((table, count));
    }
    found
}

/// Per stream of the world, how many of its messages name `player` in their body or headers
/// (hyphenated or simple form, any case), read message by message.
async fn stream_messages_mentioning(env: &TestEnv, player: Uuid) -> Vec<(StreamKind, usize)> {
    let needles = [player.hyphenated().to_string(), player.simple().to_string()];
    let names = |text: &str| {
        let text = text.to_ascii_lowercase();
        needles.iter().any(|needle| text.contains(needle.as_str()))
    };
    let mut found = Vec::new();
    for kind in StreamKind::ALL {
        let messages = env.stream_messages(kind).await;
        let count = messages
            .iter()
            .filter(|message| {
                names(&String::from_utf8_lossy(&message.payload))
                    || message.headers.iter().any(|(_, values)| values.iter().any(|value| names(value.as_str())))
            })
            .count();
        found.push((kind, count));
    }
    found
}

async fn count_for(env: &TestEnv, sql: &'static str, player: Uuid) -> i64 {
    sqlx::query_scalar(sql).bind(player).fetch_one(&env.pool).await.unwrap()
}

#[tokio::test]
async fn forget_player_leaves_only_tombstones_and_a_replayed_conversation_brings_nothing_back() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let services = [env.spawn_extract(&[]), env.spawn_relate(&[]), env.spawn_gossip(&["--gossip-tick-ms", "3600000"])];
    let pair = Pair::new();
    let bystander = Pair { npc_id: pair.npc_id, player_id: Uuid::new_v4() };
    let trade = fixtures::trade_conversation(Uuid::new_v4(), &pair);
    publish_conversation(&env, &trade).await;
    // Two threats: the NPC turns hostile or cowers, a story signal naming the player.
    publish_conversation(&env, &threat_conversation(Uuid::new_v4(), &pair)).await;
    publish_conversation(&env, &threat_conversation(Uuid::new_v4(), &pair)).await;
    publish_conversation(&env, &fixtures::trade_conversation(Uuid::new_v4(), &bystander)).await;
    // Knowledge about the player, held by the NPC, and a dead letter that names them.
    env.publish(
        &env.subject("world.fact"),
        fixtures::bytes(&json!({"fact_id": Uuid::new_v4(), "npc_ids": [pair.npc_id], "subject_id": pair.player_id,
            "category": "player_trait", "content": "Aria threatens smiths", "importance": 0.8})),
        None,
    )
    .await;
    env.publish(
        &env.subject("conversation.ended"),
        format!("{{\"player_id\":\"{}\",\"broken\":", pair.player_id).into_bytes(),
        None,
    )
    .await;
    wait_until(WAIT, "the player's pipeline output", || async {
        count_for(&env, "SELECT count(*) FROM relationships WHERE player_id = $1", pair.player_id).await == 1
            && count_for(&env, "SELECT count(*) FROM applied_conversations WHERE player_id = $1", pair.player_id).await
                == 3
            && count_for(&env, "SELECT count(*) FROM knowledge_facts WHERE subject_id = $1", pair.player_id).await >= 1
            && count_for(&env, "SELECT count(*) FROM relationships WHERE player_id = $1", bystander.player_id).await
                == 1
            && !env.stream_messages(StreamKind::Dlq).await.is_empty()
            && !env.stream_messages(StreamKind::Signals).await.is_empty()
    })
    .await;
    npcmem(&env, &["inject", &pair.npc_id.to_string(), &pair.player_id.to_string(), "--content", "Owes me a favour"])
        .await
        .assert_ok();
    let bystander_memories =
        count_for(&env, "SELECT count(*) FROM memories WHERE player_id = $1", bystander.player_id).await;
    // A conversation still waiting in the work queue when the player is forgotten, its
    // player id in the simple form and upper case, as a game may send it.
    ingest.stop().await;
    let mut waiting = threat_conversation(Uuid::new_v4(), &pair);
    waiting["player_id"] = json!(pair.player_id.simple().to_string().to_uppercase());
    publish_conversation(&env, &waiting).await;
    let before = rows_mentioning(&env, pair.player_id).await;
    let streams_before = stream_messages_mentioning(&env, pair.player_id).await;
    for kind in [StreamKind::Conversations, StreamKind::Events, StreamKind::World, StreamKind::Signals, StreamKind::Dlq]
    {
        assert!(
            streams_before.iter().any(|(k, n)| *k == kind && *n > 0),
            "{kind:?} names the player before: {streams_before:?}"
        );
    }
    let bystander_events = stream_messages_mentioning(&env, bystander.player_id).await;
    for table in ["memories", "working_memory", "relationships", "conversations", "knowledge_facts", "admin_actions"] {
        assert!(before.iter().any(|(t, n)| t == table && *n > 0), "{table} mentions the player before: {before:?}");
    }

    let refused = npcmem(&env, &["forget-player", &pair.player_id.to_string()]).await;
    assert_eq!(refused.code, exit_code::BAD_INPUT, "needs --yes: {}", refused.error);
    let forgot = npcmem(&env, &["forget-player", &pair.player_id.to_string(), "--yes"]).await;
    forgot.assert_ok();
    assert!(forgot.stdout.contains("memories") && forgot.stdout.contains("_EVENTS"), "{}", forgot.stdout);
    let streams_after = stream_messages_mentioning(&env, pair.player_id).await;
    assert!(streams_after.iter().all(|(_, n)| *n == 0), "a stream still names the player: {streams_after:?}");
    assert_eq!(
        stream_messages_mentioning(&env, bystander.player_id).await,
        bystander_events,
        "another player's messages stay"
    );
    let ingest = env.spawn_ingest(&[]);

    let after = rows_mentioning(&env, pair.player_id).await;
    for (table, count) in &after {
        let allowed = match table.as_str() {
            "conversations" => 3, // the tombstones
            "player_privacy" => 1,
            _ => 0,
        };
        assert_eq!(*count, allowed, "{table} still mentions the player: {after:?}");
    }
    let tombstones: Vec<(String, Value, String)> =
        sqlx::query_as("SELECT state, transcript, player_name FROM conversations WHERE player_id = $1")
            .bind(pair.player_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert!(
        tombstones
            .iter()
            .all(|(state, transcript, name)| state == "forgotten" && transcript == &json!([]) && name.is_empty())
    );
    assert_eq!(
        count_for(&env, "SELECT count(*) FROM memories WHERE player_id = $1", bystander.player_id).await,
        bystander_memories,
        "another player's memories stay"
    );

    // The same conversation again (a redelivery or a replay): nothing comes back.
    publish_conversation(&env, &trade).await;
    let later = fixtures::trade_conversation(Uuid::new_v4(), &bystander);
    publish_conversation(&env, &later).await;
    wait_until(WAIT, "the conversation published after the replay is processed", || async {
        count_for(&env, "SELECT count(*) FROM memories WHERE player_id = $1", bystander.player_id).await
            > bystander_memories
    })
    .await;
    let again = rows_mentioning(&env, pair.player_id).await;
    assert_eq!(again, after, "the replayed conversation restored nothing");
    let (actor, details): (String, Value) =
        sqlx::query_as("SELECT actor, details FROM admin_actions WHERE action = 'forget-player'")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(actor, "test-admin");
    assert!(details["removed"]["memories"].as_u64().unwrap() >= 2, "{details}");
    ingest.stop().await;
    for service in services {
        service.stop().await;
    }
    env.cleanup().await;
}

#[tokio::test]
async fn opt_out_stops_recording_and_opt_in_resumes() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let pair = Pair::new();
    npcmem(&env, &["opt-out", &pair.player_id.to_string()]).await.assert_ok();
    publish_conversation(&env, &fixtures::trade_conversation(Uuid::new_v4(), &pair)).await;
    wait_until(WAIT, "the conversation is refused", || async {
        env.count("SELECT count(*) FROM conversations WHERE state = 'skipped'").await == 1
    })
    .await;
    assert_eq!(env.count("SELECT count(*) FROM working_memory").await, 0);
    npcmem(&env, &["opt-in", &pair.player_id.to_string()]).await.assert_ok();
    publish_conversation(&env, &fixtures::trade_conversation(Uuid::new_v4(), &pair)).await;
    wait_until(WAIT, "the next conversation is recorded", || async {
        env.count("SELECT count(*) FROM conversations WHERE state <> 'skipped'").await == 1
    })
    .await;
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM admin_actions ORDER BY id").fetch_all(&env.pool).await.unwrap();
    assert_eq!(actions, vec!["opt-out", "opt-in"]);
    ingest.stop().await;
    env.cleanup().await;
}

/// Every exported table's rows, as Postgres renders them, in key order.
async fn snapshot(env: &TestEnv) -> Vec<(String, Vec<Value>)> {
    let mut tables = Vec::new();
    for table in npcmem_store::export::TABLES {
        let statement = format!("SELECT to_jsonb(t) FROM {} AS t ORDER BY t::text", table.name);
        let rows: Vec<Value> = sqlx::query_scalar(sqlx::AssertSqlSafe(statement)).fetch_all(&env.pool).await.unwrap();
        tables.push((table.name.to_string(), rows));
    }
    tables
}

#[tokio::test]
async fn export_then_import_into_a_fresh_database_reproduces_the_rows_and_twice_changes_nothing() {
    let source = TestEnv::new().await;
    let services = [
        source.spawn_ingest(&[]),
        source.spawn_extract(&[]),
        source.spawn_relate(&[]),
        source.spawn_gossip(&["--gossip-tick-ms", "3600000"]),
    ];
    let pair = Pair::new();
    let other = Pair::new();
    publish_conversation(&source, &fixtures::trade_conversation(Uuid::new_v4(), &pair)).await;
    publish_conversation(&source, &threat_conversation(Uuid::new_v4(), &pair)).await;
    publish_conversation(&source, &fixtures::trade_conversation(Uuid::new_v4(), &other)).await;
    source
        .publish(
            &source.subject("world.fact"),
            fixtures::bytes(&json!({"fact_id": Uuid::new_v4(), "npc_ids": [pair.npc_id, other.npc_id],
                "category": "world_event", "content": "The mill burned", "tags": ["mill"], "importance": 0.7})),
            None,
        )
        .await;
    source
        .publish(
            &source.subject("world.npc_profile"),
            fixtures::bytes(&json!({"npc_id": pair.npc_id, "name": "Brom", "factions": ["smiths_guild"],
                "drives": {"social": 0.9}})),
            None,
        )
        .await;
    wait_until(WAIT, "the pipeline output", || async {
        source.count("SELECT count(*) FROM applied_conversations").await == 3
            && source.count("SELECT count(*) FROM knowledge_facts WHERE source = 'authored'").await == 2
            && source.count("SELECT count(*) FROM npc_profiles").await == 1
    })
    .await;
    for service in services {
        service.stop().await;
    }
    let directory = std::env::temp_dir().join(format!("npcmem-export-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&directory).unwrap();
    let world_file = directory.join("world.jsonl");
    let world_path = world_file.to_str().unwrap();
    npcmem(&source, &["export", "--output", world_path]).await.assert_ok();

    let target = TestEnv::new().await;
    let imported = npcmem(&target, &["import", world_path]).await;
    imported.assert_ok();
    let expected = snapshot(&source).await;
    assert!(expected.iter().filter(|(_, rows)| !rows.is_empty()).count() >= 8, "a rich world: {expected:?}");
    assert_eq!(snapshot(&target).await, expected, "the imported rows equal the exported ones");
    let twice = npcmem(&target, &["import", world_path]).await;
    twice.assert_ok();
    assert_eq!(snapshot(&target).await, expected, "the same file twice changes nothing");
    let inserted_twice: Value = sqlx::query_scalar(
        "SELECT details -> 'inserted' FROM admin_actions WHERE action = 'import' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&target.pool)
    .await
    .unwrap();
    assert!(inserted_twice.as_object().unwrap().values().all(|n| n == 0), "{inserted_twice}");

    // One NPC's export holds that NPC's rows only.
    let npc_file = directory.join("npc.jsonl");
    npcmem(&source, &["export", "--npc", &other.npc_id.to_string(), "--output", npc_file.to_str().unwrap()])
        .await
        .assert_ok();
    let text = std::fs::read_to_string(&npc_file).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["scope"], "npcs");
    let rows: Vec<Value> = lines.map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|line| line["row"]["npc_id"] == json!(other.npc_id)), "only the NPC's rows");

    // A truncated file is refused as a whole and changes nothing.
    let fresh = TestEnv::new().await;
    let whole = std::fs::read_to_string(&world_file).unwrap();
    let cut: Vec<&str> = whole.lines().collect();
    let truncated = directory.join("truncated.jsonl");
    std::fs::write(&truncated, cut[..cut.len() - 1].join("\n")).unwrap();
    let refused = npcmem(&fresh, &["import", truncated.to_str().unwrap()]).await;
    assert_eq!(refused.code, exit_code::BAD_INPUT, "{}", refused.error);
    assert!(refused.error.contains("truncated"), "{}", refused.error);
    assert_eq!(fresh.count("SELECT count(*) FROM memories").await, 0);
    let garbage = directory.join("garbage.jsonl");
    std::fs::write(&garbage, "hello\n").unwrap();
    assert_eq!(npcmem(&fresh, &["import", garbage.to_str().unwrap()]).await.code, exit_code::BAD_INPUT);
    std::fs::remove_dir_all(&directory).unwrap();
    source.cleanup().await;
    target.cleanup().await;
    fresh.cleanup().await;
}

#[tokio::test]
async fn the_demo_plays_its_scene_through_the_services_and_shows_the_npc_remember() {
    let env = TestEnv::new().await;
    let services = [
        env.spawn_ingest(&[]),
        env.spawn_extract(&[]),
        env.spawn_relate(&[]),
        env.spawn_gossip(&["--gossip-tick-ms", "300", "--gossip-budget", "10"]),
        env.spawn_enrich(&[]),
    ];
    // As after deploy/local/up: the services answer before the demo starts.
    env.request_json("query.relationship", &json!({"npc_id": Uuid::new_v4(), "player_id": Uuid::new_v4()})).await;
    let demo = npcmem(&env, &["demo", "--timeout-secs", "50"]).await;
    demo.assert_ok();
    let output = &demo.stdout;
    let (before, after) = output.split_once("=== Brom's prompt after the scene ===").expect("both prompts printed");
    assert!(before.contains("=== The scene ===\n- Aria trades with Brom: \""), "the scene under its heading: {output}");
    assert!(!output.contains("[[") && !output.contains('⭐') && !output.contains('📝'), "plain text: {output}");
    assert!(before.contains("reputation: stranger"), "{output}");
    let after_reputation = after.lines().find(|line| line.starts_with("reputation:")).unwrap();
    assert!(!after_reputation.contains("stranger"), "the reputation changed: {after_reputation}");
    assert!(after.to_lowercase().contains("sword"), "the remembered trade reaches the prompt: {after}");
    assert!(
        output.contains("Hale told you Aria threatened them") && output.contains("heard through gossip"),
        "the news, from Brom's side: {output}"
    );
    assert!(output.contains("relationship_changed") || output.contains("memory_milestone"), "signals: {output}");
    let (_, hale) = output.split_once("=== Hale's relationship with Aria ===").expect("Hale's relationship printed");
    assert!(hale.contains("stage: enemy") || hale.contains("stage: rival"), "two death threats: {hale}");
    assert!(
        output.contains("/ npc_hostile: Hale") || output.contains("/ npc_cowered: Hale"),
        "the threats turned Hale hostile or cowed, with the signal: {output}"
    );
    // Brom's own deeds are his memories, shown once; not again under what he knows.
    let (_, knows) = after.split_once("Things you know:").expect("Brom knows something");
    assert!(!knows.contains("Aria rescued you"), "shown twice: {after}");

    // Played again on the same system: a new Brom, who hears nothing of the first run's Aria.
    let again = npcmem(&env, &["demo", "--timeout-secs", "50"]).await;
    again.assert_ok();
    let (_, after) = again.stdout.split_once("=== Brom's prompt after the scene ===").expect("both prompts printed");
    let knows = after.split_once("Things you know:").map_or("", |(_, knows)| knows);
    assert!(!knows.contains("Brom told you"), "Brom hears of himself from the first run's Brom: {after}");
    let lines: Vec<&str> = knows.lines().filter(|line| line.starts_with("- ")).collect();
    assert!(lines.iter().all(|line| lines.iter().filter(|other| *other == line).count() == 1), "{after}");
    for service in services {
        service.stop().await;
    }
    env.cleanup().await;
}
