use std::time::Duration;

use npcmem_llm::{
    CompletionOptions, LlmClient, LlmError, LlmProvider, OpenAiClient, OpenAiConfig, RetrySettings, TokenUsage,
};
use serde_json::json;

use crate::support::{Reply, TestServer, extraction_messages, extraction_options, quick_retry};

pub fn openai_client(base_url: &str, api_key: Option<&str>, timeout: Duration, retry: RetrySettings) -> OpenAiClient {
    OpenAiClient::new(OpenAiConfig {
        base_url: format!("{base_url}/v1"),
        api_key: api_key.map(str::to_owned),
        model: "llama-3.1-8b-instruct".into(),
        timeout,
        retry,
    })
    .expect("a valid test config")
}

pub fn chat_reply(content: &str, prompt_tokens: u32, completion_tokens: u32) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "llama-3.1-8b-instruct",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }),
    )
}

#[tokio::test]
async fn openai_completion_sends_the_chat_request_and_reads_the_reply() {
    let server = TestServer::start(vec![chat_reply(r#"{"memories":[]}"#, 42, 7)]).await;
    let client = openai_client(&server.base_url, Some("sk-test"), Duration::from_secs(5), quick_retry());

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.content, r#"{"memories":[]}"#);
    assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
    assert_eq!(completion.usage, TokenUsage { prompt_tokens: 42, completion_tokens: 7 });
    assert_eq!(completion.attempts, 1);

    let received = server.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "model": "llama-3.1-8b-instruct",
            "messages": [
                {"role": "system", "content": "Return a JSON array of memories."},
                {"role": "user", "content": "Aria: I need a sword.\nBrom: That'll be 50 gold."},
            ],
            "temperature": 0.3,
            "max_tokens": 500,
            "response_format": {"type": "json_object"},
        })
    );
}

#[tokio::test]
async fn openai_without_key_or_json_mode_sends_neither() {
    let server = TestServer::start(vec![chat_reply("[]", 1, 1)]).await;
    let client = openai_client(&server.base_url, Some("  "), Duration::from_secs(5), quick_retry());
    let options = CompletionOptions { temperature: 0.7, max_tokens: 64, json_mode: false };

    client.complete(&extraction_messages(), &options).await.expect("completes");

    let request = &server.received()[0];
    assert_eq!(request.header("authorization"), None, "a blank key is no key");
    let body = request.json();
    assert!(body.get("response_format").is_none(), "{body}");
    assert_eq!(body["temperature"], json!(0.7));
    assert_eq!(body["max_tokens"], json!(64));
}

#[tokio::test]
async fn openai_reply_without_usage_counts_zero_tokens() {
    // llama.cpp and LM Studio builds differ on whether they report usage.
    let server = TestServer::start(vec![Reply::json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": "[]"}, "finish_reason": "length"}]}),
    )])
    .await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.usage, TokenUsage::default());
    assert_eq!(completion.finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn llm_client_enum_delegates_to_the_configured_provider() {
    let server = TestServer::start(vec![chat_reply("[]", 3, 2)]).await;
    let client = LlmClient::from(openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry()));

    assert_eq!(client.name(), "openai");
    assert_eq!(client.model(), "llama-3.1-8b-instruct");
    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");
    assert_eq!(completion.content, "[]");
}

#[tokio::test]
async fn garbage_body_is_an_invalid_response_and_not_retried() {
    let server = TestServer::start(vec![Reply::raw(200, "<html>hello from a captive portal</html>")]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("garbage fails");

    assert!(matches!(error, LlmError::InvalidResponse(_)), "{error:?}");
    assert!(!error.is_retryable());
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn json_without_choices_is_an_invalid_response() {
    let server = TestServer::start(vec![Reply::json(200, json!({"object": "list", "data": []}))]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("no choices");

    assert!(matches!(error, LlmError::InvalidResponse(_)), "{error:?}");
    assert_eq!(server.received().len(), 1);
}
