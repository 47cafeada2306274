//! Every error enrich answers is the one object `{"error":{"code","message","field"}}`,
//! over NATS and HTTP alike, naming the field in JSON's terms and never a Rust type; the
//! HTTP listener answers unknown paths (404), wrong methods (405) and oversized bodies
//! (413) with the same object.

use std::time::Duration;

use npcmem_tests::{TestEnv, free_port, http_request, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

fn assert_error(reply: &Value, code: &str, field: Option<&str>) {
    let error = &reply["error"];
    assert_eq!(error["code"], code, "{reply}");
    assert_eq!(error["field"].as_str(), field, "{reply}");
    let message = error["message"].as_str().expect("a message");
    if let Some(field) = field {
        assert!(message.contains(field), "the message names {field}: {message}");
    }
    for rust in ["struct ", "u32", "usize", "Persona", "EnrichRequest", "UUID parsing failed"] {
        assert!(!message.contains(rust), "no Rust in {message}");
    }
}

#[tokio::test]
async fn every_enrich_and_query_error_names_its_field_over_nats_and_http() {
    let env = TestEnv::new().await;
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let enrich = env.spawn_enrich(&["--http-addr", &address]);
    let (npc, player) = (Uuid::new_v4(), Uuid::new_v4());
    let valid = json!({"npc_id": npc, "player_id": player, "max_tokens": 500, "npc": {"name": "Brom"}});
    let with = |key: &str, value: Value| {
        let mut request = valid.clone();
        request[key] = value;
        request
    };
    let without = |key: &str| {
        let mut request = valid.clone();
        request.as_object_mut().expect("an object").remove(key);
        request
    };
    let cases: Vec<(&str, Value, &str, Option<&str>)> = vec![
        ("enrich.request", with("npc_id", json!("r1")), "invalid_uuid", Some("npc_id")),
        ("enrich.request", with("player_id", json!(42)), "invalid_uuid", Some("player_id")),
        ("enrich.request", without("player_id"), "missing_field", Some("player_id")),
        ("enrich.request", with("npc", json!("Brom")), "invalid_field", Some("npc")),
        ("enrich.request", with("npc", json!({"name": 5})), "invalid_field", Some("npc.name")),
        ("enrich.request", with("npc", json!({"role": "smith"})), "missing_field", Some("npc.name")),
        ("enrich.request", with("max_tokens", json!(-3)), "invalid_field", Some("max_tokens")),
        ("enrich.request", with("max_tokens", json!(5)), "invalid_field", Some("max_tokens")),
        ("query.relationship", json!({"npc_id": "nope", "player_id": player}), "invalid_uuid", Some("npc_id")),
        ("query.memories", json!({"npc_id": npc}), "missing_field", Some("player_id")),
        ("query.knowledge", json!({"npc_id": [1]}), "invalid_uuid", Some("npc_id")),
    ];
    for (suffix, request, code, field) in &cases {
        let reply = env.request_json(suffix, request).await;
        assert_error(&reply, code, *field);
    }
    let reply = env.request_raw(&env.subject("enrich.request"), b"{oops".to_vec()).await;
    assert_error(&reply, "invalid_json", None);

    wait_until(Duration::from_secs(20), "enrich's HTTP listener", || async {
        http_request(port, "GET", "/healthz", b"").await.is_some()
    })
    .await;
    let http = |method: &'static str, path: &'static str, body: Vec<u8>| async move {
        let (status, text) = http_request(port, method, path, &body).await.expect("an HTTP answer");
        let reply: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("a JSON body for {status}: {text}"));
        (status, reply)
    };
    let (status, reply) = http("POST", "/v1/context", serde_json::to_vec(&with("npc", json!("Brom"))).unwrap()).await;
    assert_eq!(status, 400);
    assert_error(&reply, "invalid_field", Some("npc"));
    let (status, reply) = http("GET", "/v1/context", Vec::new()).await;
    assert_eq!(status, 405);
    assert_error(&reply, "method_not_allowed", None);
    let (status, reply) = http("GET", "/v2/anything", Vec::new()).await;
    assert_eq!(status, 404);
    assert_error(&reply, "not_found", None);
    let (status, reply) = http("POST", "/v1/context", vec![b' '; 3 * 1024 * 1024]).await;
    assert_eq!(status, 413);
    assert_error(&reply, "payload_too_large", None);

    enrich.stop().await;
    env.cleanup().await;
}
