//! The HTTP front door of ingest: a valid conversation is accepted (202) and processed
//! once even when posted twice; each kind of bad input gets 400 (413 when too large) with
//! the reason code the dead-letter stream would carry, and nothing is published for it.
//! World messages go the same way to their subjects.

use std::time::Duration;

use npcmem_bus::topology::StreamKind;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{TestEnv, free_port, http_request, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

async fn last_sequence(env: &TestEnv, kind: StreamKind) -> u64 {
    let mut stream = env.js.get_stream(env.topology.stream_name(kind)).await.expect("the stream exists");
    stream.info().await.expect("stream info").state.last_sequence
}

async fn post(port: u16, path: &str, body: &[u8]) -> (u16, Value) {
    let (status, text) = http_request(port, "POST", path, body).await.expect("an HTTP answer");
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON for {status}: {text}")))
}

#[tokio::test]
async fn conversations_posted_over_http_are_validated_then_published_once() {
    let env = TestEnv::new().await;
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let ingest = env.spawn_ingest(&["--http-addr", &address]);
    wait_until(Duration::from_secs(20), "ingest's HTTP listener", || async {
        matches!(http_request(port, "GET", "/readyz", b"").await, Some((200, _)))
    })
    .await;

    let pair = Pair::new();
    let id = Uuid::new_v4();
    let valid = fixtures::trade_conversation(id, &pair);
    let bytes = fixtures::bytes(&valid);
    let (status, reply) = post(port, "/v1/conversations", &bytes).await;
    assert_eq!((status, &reply["conversation_id"]), (202, &json!(id)), "{reply}");
    assert_eq!(reply["duplicate"], false);
    let (status, reply) = post(port, "/v1/conversations", &bytes).await;
    assert_eq!((status, &reply["duplicate"]), (202, &json!(true)), "the second post is the same message: {reply}");
    wait_until(Duration::from_secs(30), "the conversation recorded", || async {
        env.count("SELECT count(*) FROM conversations").await == 1
    })
    .await;

    let published = last_sequence(&env, StreamKind::Conversations).await;
    let with = |key: &str, value: Value| {
        let mut document = valid.clone();
        document[key] = value;
        fixtures::bytes(&document)
    };
    let mut too_many = valid.clone();
    too_many["messages"] = json!(vec![json!({"speaker": "player", "text": "hi"}); 201]);
    let mut missing = valid.clone();
    missing.as_object_mut().expect("an object").remove("player_id");
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{\"conversation_id\":".to_vec(), 400, "invalid_json"),
        (b"\xff\xfe".to_vec(), 400, "invalid_utf8"),
        (with("npc_id", json!("r1")), 400, "invalid_uuid"),
        (fixtures::bytes(&missing), 400, "missing_field"),
        (with("schema_version", json!(9)), 400, "schema_version"),
        (with("started_at", json!("yesterday")), 400, "invalid_field"),
        (with("messages", json!([{"speaker": "npc", "text": "x".repeat(4_001)}])), 400, "text_too_long"),
        (fixtures::bytes(&too_many), 400, "too_many_messages"),
        (with("padding", json!("x".repeat(70 * 1024))), 413, "payload_too_large"),
    ];
    for (body, status, code) in &cases {
        let (got, reply) = post(port, "/v1/conversations", body).await;
        assert_eq!((got, reply["error"]["code"].as_str()), (*status, Some(*code)), "{reply}");
    }
    assert_eq!(last_sequence(&env, StreamKind::Conversations).await, published, "nothing published for a 4xx");

    // World messages: to their own subject, refused the same way.
    let world_before = last_sequence(&env, StreamKind::World).await;
    let moved = json!({"npc_id": pair.npc_id, "room_id": "forge", "at": "2026-12-05T10:00:00Z"});
    let (status, reply) = post(port, "/v1/world/npc_moved", &fixtures::bytes(&moved)).await;
    assert_eq!(status, 202, "{reply}");
    let (status, reply) = post(port, "/v1/world/npc_moved", &fixtures::bytes(&moved)).await;
    assert_eq!((status, &reply["duplicate"]), (202, &json!(true)), "{reply}");
    let (status, reply) = post(port, "/v1/world/npc_moved", br#"{"npc_id":"x","room_id":"forge"}"#).await;
    assert_eq!((status, reply["error"]["field"].as_str()), (400, Some("npc_id")), "{reply}");
    let (status, reply) = post(port, "/v1/world/weather", b"{}").await;
    assert_eq!((status, reply["error"]["code"].as_str()), (404, Some("not_found")), "{reply}");
    assert_eq!(last_sequence(&env, StreamKind::World).await, world_before + 1, "one world message stored");

    ingest.stop().await;
    env.cleanup().await;
}
