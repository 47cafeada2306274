use std::time::Duration;

use npcmem_llm::{AnthropicClient, AnthropicConfig, LlmError, LlmProvider, RetrySettings, TokenUsage};
use serde_json::json;

use crate::support::{Reply, TestServer, extraction_messages, extraction_options, quick_retry};

fn anthropic_client(base_url: &str, retry: RetrySettings) -> AnthropicClient {
    AnthropicClient::new(AnthropicConfig {
        base_url: base_url.to_owned(),
        api_key: Some("sk-ant-test".into()),
        model: "claude-haiku-4-5".into(),
        timeout: Duration::from_secs(5),
        retry,
    })
    .expect("a valid test config")
}

fn message_reply(texts: &[&str], input_tokens: u32, output_tokens: u32) -> Reply {
    let content: Vec<_> = texts.iter().map(|text| json!({"type": "text", "text": text})).collect();
    Reply::json(
        200,
        json!({
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }),
    )
}

#[tokio::test]
async fn anthropic_completion_sends_the_messages_request_and_reads_the_reply() {
    let server = TestServer::start(vec![message_reply(&["[{\"content\": ", "\"sword\"}]"], 120, 30)]).await;
    let client = anthropic_client(&server.base_url, quick_retry());

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.content, r#"[{"content": "sword"}]"#);
    assert_eq!(completion.finish_reason.as_deref(), Some("end_turn"));
    assert_eq!(completion.usage, TokenUsage { prompt_tokens: 120, completion_tokens: 30 });
    assert_eq!(completion.attempts, 1);
    assert_eq!(client.name(), "anthropic");

    let received = server.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "model": "claude-haiku-4-5",
            "max_tokens": 500,
            "temperature": 0.3,
            "system": "Return a JSON array of memories.",
            "messages": [{"role": "user", "content": "Aria: I need a sword.\nBrom: That'll be 50 gold."}],
        })
    );
}

#[tokio::test]
async fn anthropic_overloaded_529_is_retried() {
    let overloaded =
        Reply::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
    let server = TestServer::start(vec![overloaded, message_reply(&["[]"], 10, 2)]).await;
    let client = anthropic_client(&server.base_url, quick_retry());

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.content, "[]");
    assert_eq!(completion.attempts, 2);
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn anthropic_error_body_is_kept_for_a_rejected_request() {
    let rejected = Reply::json(
        401,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    );
    let server = TestServer::start(vec![rejected]).await;
    let client = anthropic_client(&server.base_url, quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("rejected");

    let LlmError::Client { status, body } = &error else { panic!("expected a client error, got {error:?}") };
    assert_eq!(*status, 401);
    assert!(body.contains("invalid x-api-key"), "{body}");
    assert_eq!(server.received().len(), 1);
}
