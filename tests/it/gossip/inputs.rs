//! What comes in and goes out: bad world messages, secrets told in conversations,
//! and what reaches enrich's cached contexts.

use super::*;

#[tokio::test]
async fn a_bad_world_message_is_dead_lettered_alone_and_its_batch_is_applied() {
    let env = TestEnv::new().await;
    let (npc, witness) = (Uuid::new_v4(), Uuid::new_v4());
    let blank = json!({"observation_id": Uuid::new_v4(), "witness_ids": [witness], "category": "world_event",
                       "content": "  ", "importance": 0.8, "at": Utc::now()});
    let long = json!({"fact_id": Uuid::new_v4(), "npc_ids": [witness], "category": "world_event",
                      "content": "x".repeat(2001), "importance": 0.8});
    // Published before the service starts, so one batch holds the good and the bad.
    move_npc(&env, npc, "mill").await;
    world(&env, "world.observation", blank).await;
    let news = author(&env, &[witness], "The mill burned down", 0.8, 1.0, &[]).await;
    world(&env, "world.fact", long).await;
    world(&env, "world.npc_moved", json!({"npc_id": witness, "room_id": "r".repeat(201), "at": Utc::now()})).await;
    let gossip = spawn(&env);

    wait_until(WAIT, "three dead letters", || async { env.stream_messages(StreamKind::Dlq).await.len() == 3 }).await;
    let letters = env.stream_messages(StreamKind::Dlq).await;
    let reasons: Vec<(String, String)> = letters
        .iter()
        .map(|letter| {
            let header = |name: &str| letter.headers.get(name).map(|v| v.as_str().to_owned()).unwrap_or_default();
            (header(npcmem_bus::dlq::HEADER_REASON), header(npcmem_bus::dlq::HEADER_MESSAGE))
        })
        .collect();
    assert_eq!(
        reasons.iter().map(|(code, _)| code.as_str()).collect::<Vec<_>>(),
        vec!["invalid_field", "text_too_long", "invalid_field"],
        "{reasons:?}"
    );
    assert!(reasons[0].1.contains("content is blank"), "{reasons:?}");
    assert!(reasons[2].1.contains("room_id has 201 chars"), "{reasons:?}");
    assert!(letters.iter().all(|letter| letter.subject.as_str() == env.topology.dlq(npcmem_gossip::CONSUMER_WORLD)));
    // The good messages of the same batch are applied, each once.
    wait_rows(&env, "the good fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    assert_eq!(confidence_of(&env, witness, news).await, Some(1.0));
    wait_rows(&env, "the good move", "SELECT count(*) FROM npc_locations", 1).await;
    gossip.stop().await;
    env.cleanup().await;
}

pub(super) fn knowledge_section(reply: &Value) -> String {
    let sections = reply["sections"].as_array().cloned().unwrap_or_default();
    let knowledge = sections.iter().find(|s| s["provider"] == "knowledge");
    knowledge.and_then(|s| s["content"].as_str()).unwrap_or_default().to_owned()
}

fn mood_section(reply: &Value) -> Option<String> {
    let sections = reply["sections"].as_array()?;
    sections.iter().find(|s| s["provider"] == "mood")?["content"].as_str().map(str::to_owned)
}

/// What gossip learns reaches prompts at once (it invalidates the enrichers' caches), and
/// what expires leaves them even from a cached context.
#[tokio::test]
async fn learned_facts_and_moods_reach_a_cached_context_and_expired_ones_leave_it() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let enrich = env.spawn_enrich(&[]);
    let (npc, player) = (Uuid::new_v4(), Uuid::new_v4());
    let request = json!({"npc_id": npc, "player_id": player, "max_tokens": 1024});
    let expires = Utc::now() + TimeDelta::seconds(3);
    world(
        &env,
        "world.fact",
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "category": "location_info",
        "content": "The ferry runs until dusk", "importance": 0.6, "expires_at": expires}),
    )
    .await;
    world(
        &env,
        "world.npc_profile",
        json!({"npc_id": npc, "name": "Orla", "mood": {"mood": "anxious", "intensity": 0.9, "expires_at": expires}}),
    )
    .await;
    wait_until(WAIT, "the fact and the mood in the context", || async {
        let reply = env.request_json("enrich.request", &request).await;
        knowledge_section(&reply).contains("The ferry runs until dusk") && mood_section(&reply).is_some()
    })
    .await;
    // The context is cached now (TTL 300 s); a fact learned later shows anyway.
    world(
        &env,
        "world.fact",
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "category": "world_event",
        "content": "The toll bridge burned", "importance": 0.7}),
    )
    .await;
    wait_until(WAIT, "the new fact in the cached context", || async {
        knowledge_section(&env.request_json("enrich.request", &request).await).contains("The toll bridge burned")
    })
    .await;
    tokio::time::sleep((expires - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(100)).await;
    let reply = env.request_json("enrich.request", &request).await;
    let knowledge = knowledge_section(&reply);
    assert!(knowledge.contains("The toll bridge burned") && !knowledge.contains("ferry"), "{reply}");
    assert_eq!(mood_section(&reply), None, "the mood expired: {reply}");
    enrich.stop().await;
    gossip.stop().await;
    env.cleanup().await;
}

/// A secret told in a conversation is learned as gossip and signalled once, however
/// often its event is delivered.
#[tokio::test]
async fn a_secret_told_in_conversation_signals_once() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let pair = npcmem_tests::fixtures::Pair::new();
    let secret =
        npcmem_tests::fixtures::EventMemory { tags: &["secret"], importance: 0.8, valence: "neutral", intensity: 0.3 };
    let event = npcmem_tests::fixtures::memory_stored(Uuid::new_v4(), &pair, &[secret], Utc::now(), &[], &[]);
    let payload = serde_json::to_vec(&event).unwrap();
    env.publish(&env.subject("event.memory.stored"), payload.clone(), None).await;
    wait_rows(&env, "the secret learned", "SELECT count(*) FROM knowledge_facts WHERE category = 'npc_gossip'", 1)
        .await;
    // The same event again (a redelivery past the dedup window).
    env.publish(&env.subject("event.memory.stored"), payload, None).await;
    wait_until(WAIT, "the signal published", || async {
        !env.stream_messages(StreamKind::Signals).await.is_empty()
            && env.count("SELECT count(*) FROM outbox").await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signals: Vec<Value> = env
        .stream_messages(StreamKind::Signals)
        .await
        .iter()
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(
        (&signals[0]["signal_type"], &signals[0]["npc_id"], &signals[0]["player_id"], &signals[0]["source"]),
        (&json!("secret_learned"), &json!(pair.npc_id), &json!(pair.player_id), &json!("conversation"))
    );
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 1);
    gossip.stop().await;
    env.cleanup().await;
}
