//! Recall: every turn a pair exchanged stays findable, dated by when it was
//! said, within the prompt budget; `query.recall` searches it for game logic.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use npcmem_core::tokens::count_tokens;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

async fn publish_all(env: &TestEnv, documents: &[(Uuid, Value)]) {
    for (id, document) in documents {
        env.publish(&env.subject("conversation.ended"), fixtures::bytes(document), Some(&id.to_string())).await;
    }
}

async fn recorded(env: &TestEnv, count: i64) {
    wait_until(WAIT, "the conversations recorded", || async {
        env.count("SELECT count(*) FROM conversations").await >= count
    })
    .await;
}

fn context_request(pair: &Pair, message: Option<&str>, max_tokens: u32) -> Value {
    json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "message": message, "max_tokens": max_tokens})
}

fn section<'a>(reply: &'a Value, provider: &str) -> Option<&'a str> {
    reply["sections"].as_array()?.iter().find(|s| s["provider"] == provider)?["content"].as_str()
}

const SMALL_TALK: [&str; 4] =
    ["Good morning, how is the forge today?", "Hot as ever. Buying or browsing?", "Just looking.", "Suit yourself."];

#[tokio::test]
async fn something_said_thirty_conversations_ago_in_other_words_is_recalled_and_nothing_of_another_pair() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    let mut documents = vec![fixtures::conversation_at(
        &pair,
        95,
        &["My brother Tomas went missing near the old mill.", "I will keep my ears open for news of him."],
    )];
    for days_ago in (1..=30).rev() {
        documents.push(fixtures::conversation_at(&pair, days_ago * 3, &SMALL_TALK));
    }
    // The same NPC, another player: nothing of theirs may reach this pair's prompt.
    let other = Pair { npc_id: pair.npc_id, player_id: Uuid::new_v4() };
    documents.push(fixtures::conversation_at(&other, 10, &["My sister Lina vanished by the mills too.", "Sad times."]));
    publish_all(&env, &documents).await;
    recorded(&env, 32).await;

    let question = "Any news about my missing brother? He disappeared by the mills.";
    let reply = env.enrich_loaded(&context_request(&pair, Some(question), 1024), &[]).await;
    let recall = section(&reply, "recall").unwrap_or_else(|| panic!("a recall section: {reply}"));
    assert!(recall.contains("- Aria: My brother Tomas went missing near the old mill."), "{recall}");
    assert!(recall.contains("- You: I will keep my ears open for news of him."), "with its reply: {recall}");
    // Dated both ways: the fixture's conversation ran 95 days ago, around this time of day.
    let dates: Vec<String> = [95, 94, 96]
        .iter()
        .map(|days| format!("3 months ago, on {}:", (Utc::now() - TimeDelta::days(*days)).format("%-d %B %Y")))
        .collect();
    assert!(dates.iter().any(|date| recall.contains(date)), "dated by when it was said ({dates:?}): {recall}");
    assert!(!reply.to_string().contains("Lina"), "another pair's turn leaked: {reply}");

    // The other player is forgotten; this pair is not touched, theirs recalls nothing.
    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, other.player_id, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(&documents.last().unwrap().1), None).await;
    let forgotten = env.enrich_loaded(&context_request(&other, Some("my sister Lina"), 1024), &[]).await;
    assert!(section(&forgotten, "recall").is_none(), "{forgotten}");
    assert!(!forgotten.to_string().contains("Lina"), "{forgotten}");
    let found = env
        .request_json("query.recall", &json!({"npc_id": other.npc_id, "player_id": other.player_id, "text": "Lina"}))
        .await;
    assert_eq!(found["count"], 0, "{found}");

    // A player who opts out recalls nothing either.
    let mut connection = env.pool.acquire().await.unwrap();
    npcmem_store::privacy::set_allow_memory(&mut connection, pair.player_id, false, Utc::now()).await.unwrap();
    drop(connection);
    let opted_out = env
        .request_json("query.recall", &json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "text": "brother"}))
        .await;
    assert_eq!(opted_out["count"], 0, "{opted_out}");
    enrich.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn ages_follow_the_conversations_own_time_for_memories_turns_and_summaries() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    // A backfilled conversation from three weeks ago: a trade the rules extractor keeps.
    let (id, document) = fixtures::conversation_at(
        &pair,
        22,
        &["I need a sword.", "Fifty gold for a fine blade.", "Deal, here is the gold.", "Pleasure doing business."],
    );
    publish_all(&env, &[(id, document)]).await;
    wait_until(WAIT, "the memory extracted", || async { env.count("SELECT count(*) FROM memories").await >= 1 }).await;
    let created: DateTime<Utc> =
        sqlx::query_scalar("SELECT min(created_at) FROM memories").fetch_one(&env.pool).await.unwrap();
    assert!((Utc::now() - created).num_days() >= 20, "dated when it happened: {created}");

    let reply = env.enrich_loaded(&context_request(&pair, Some("that sword and its gold"), 1024), &[]).await;
    let memory = section(&reply, "memory").unwrap_or_else(|| panic!("a memory section: {reply}"));
    assert!(memory.contains("3 weeks ago"), "{memory}");
    let recall = section(&reply, "recall").unwrap_or_else(|| panic!("a recall section: {reply}"));
    assert!(recall.contains("3 weeks ago, on "), "{recall}");
    let summary = section(&reply, "working_memory").expect("the working memory");
    assert!(summary.contains("(3 weeks ago, on "), "{summary}");
    enrich.stop().await;
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn the_budget_is_never_exceeded_each_section_keeps_its_best_line_and_matching_turns_take_the_rest() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let relate = env.spawn_relate(&[]);
    let enrich = env.spawn_enrich(&[]);
    let pair = Pair::new();
    let mut documents = Vec::new();
    for i in 0..40 {
        let line = format!("The harvest festival {i} had lanterns, music and a sword dance by the river.");
        documents.push(fixtures::conversation_at(
            &pair,
            60 - i,
            &["I'll buy a sword.", "Fifty gold for a fine blade.", &line, "The festival was grand that year."],
        ));
    }
    publish_all(&env, &documents).await;
    wait_until(WAIT, "every conversation extracted and related", || async {
        env.count("SELECT count(*) FROM applied_conversations").await >= 40
    })
    .await;
    sqlx::query(
        "INSERT INTO knowledge_facts (id, npc_id, origin_fact_id, category, content, tags, confidence, importance, source)
         VALUES (gen_random_uuid(), $1, gen_random_uuid(), 'world_event', 'The river floods every spring.', '{}', 1.0,
                 0.6, 'authored')",
    )
    .bind(pair.npc_id)
    .execute(&env.pool)
    .await
    .unwrap();
    let message = "Tell me about the festival lanterns and the sword dance";
    let mut previous_recall_tokens = 0;
    for max_tokens in [128, 256, 512, 1024, 2048, 4096] {
        let reply = env.enrich_loaded(&context_request(&pair, Some(message), max_tokens), &[]).await;
        let token_count = reply["token_count"].as_u64().unwrap_or_else(|| panic!("{reply}")) as u32;
        assert!(token_count <= max_tokens, "{token_count} > {max_tokens}: {reply}");
        let context = reply["placeholders"]["memory_context"].as_str().unwrap();
        assert_eq!(token_count as usize, count_tokens(context), "the reply counts what it returns");
        for s in reply["sections"].as_array().unwrap() {
            assert_eq!(s["token_count"].as_u64().unwrap() as usize, count_tokens(s["content"].as_str().unwrap()));
        }
        if max_tokens >= 512 {
            // A section's best line stays where it fits the section's share (a summary of
            // ~60 tokens does not fit working memory's 10 % of 512).
            let kept: &[&str] = if max_tokens >= 1024 {
                &["relationship", "working_memory", "memory", "recall", "knowledge"]
            } else {
                &["relationship", "memory", "recall", "knowledge"]
            };
            for provider in kept {
                assert!(section(&reply, provider).is_some(), "{provider} dropped at {max_tokens}: {reply}");
            }
            let recall_tokens = count_tokens(section(&reply, "recall").unwrap());
            assert!(recall_tokens >= previous_recall_tokens, "recall takes what the others leave");
            // The turns match the message, the summaries and memories do not: recall earns
            // far more than its configured quarter.
            assert!(2 * recall_tokens >= token_count as usize, "recall {recall_tokens} of {token_count}: {reply}");
            previous_recall_tokens = recall_tokens;
        }
        if (512..=2048).contains(&max_tokens) {
            // 40 matching conversations say more than any of these budgets hold.
            assert!(
                token_count as f64 >= 0.9 * f64::from(max_tokens),
                "budget left unused: {token_count}/{max_tokens}"
            );
        }
    }
    enrich.stop().await;
    relate.stop().await;
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn query_recall_filters_by_time_speaker_and_limit_as_the_ledger_holds_them() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let enrich = env.spawn_enrich(&["--recall-max-turns-per-pair", "16"]);
    let pair = Pair::new();
    let documents: Vec<(Uuid, Value)> = (0..5)
        .map(|i| {
            let player_line = format!("I lost my amulet number {i} near the well.");
            let npc_line = format!("Amulet {i}? I saw a crow with something shiny.");
            fixtures::conversation_at(&pair, 50 - i * 10, &[&player_line, &npc_line, "Thanks.", "Farewell."])
        })
        .collect();
    publish_all(&env, &documents).await;
    recorded(&env, 5).await;
    let base = json!({"npc_id": pair.npc_id, "player_id": pair.player_id});
    let query = |extra: Value| {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };

    // The cap (16 turns = the 4 newest conversations) hides the oldest one.
    let all = env.request_json("query.recall", &query(json!({"text": "amulets", "limit": 200}))).await;
    assert_eq!(all["count"], 8, "{all}");
    assert!(!all.to_string().contains("amulet number 0"), "beyond the cap: {all}");

    let players = env.request_json("query.recall", &query(json!({"text": "amulet", "speaker": "player"}))).await;
    let turns = players["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4);
    assert!(turns.iter().all(|t| t["speaker"] == "player" && t["turn"] == 0 && t["score"].as_f64().unwrap() > 0.0));

    // Between 35 and 15 days ago: conversations 2 and 3 (started 30 and 20 days ago).
    let from = (Utc::now() - TimeDelta::days(35)).to_rfc3339();
    let to = (Utc::now() - TimeDelta::days(15)).to_rfc3339();
    let ranged = env.request_json("query.recall", &query(json!({"from": from, "to": to, "limit": 3}))).await;
    assert_eq!(ranged["count"], 8, "{ranged}");
    let turns = ranged["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "the limit");
    assert!(turns.iter().all(|t| t["score"].is_null()), "no text: newest first, unscored");
    assert_eq!(turns[0]["text"], "Farewell.");
    // Against the ledger: each turn is the row's transcript entry, dated within the row.
    for turn in turns {
        let conversation_id: Uuid = turn["conversation_id"].as_str().unwrap().parse().unwrap();
        let (transcript, started_at, ended_at): (Value, DateTime<Utc>, DateTime<Utc>) =
            sqlx::query_as("SELECT transcript, started_at, ended_at FROM conversations WHERE conversation_id = $1")
                .bind(conversation_id)
                .fetch_one(&env.pool)
                .await
                .unwrap();
        let index = turn["turn"].as_u64().unwrap() as usize;
        assert_eq!(transcript[index]["text"], turn["text"]);
        let said_at: DateTime<Utc> = turn["said_at"].as_str().unwrap().parse().unwrap();
        assert!(said_at >= started_at && said_at <= ended_at);
    }

    for (bad, code, field) in [
        (query(json!({"from": to, "to": from})), "invalid_field", "from"),
        (query(json!({"limit": 0})), "invalid_field", "limit"),
        (query(json!({"speaker": "narrator"})), "invalid_field", "narrator"),
        (json!({"npc_id": "not-a-uuid", "player_id": pair.player_id}), "invalid_uuid", ""),
    ] {
        let reply = env.request_json("query.recall", &bad).await;
        assert_eq!(reply["error"]["code"], code, "{reply}");
        assert!(reply["error"]["message"].as_str().unwrap().contains(field), "{reply}");
    }

    // Decay's cap blanks what lies beyond it in the ledger itself.
    let mut connection = env.pool.acquire().await.unwrap();
    let evicted = npcmem_store::recall::evict_beyond_cap(&mut connection, 16).await.unwrap();
    assert_eq!(evicted, 1);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM conversations WHERE transcript <> '[]'::jsonb")
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    assert_eq!(kept, 4);
    enrich.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}
