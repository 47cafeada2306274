use std::time::{Duration, Instant};

use npcmem_llm::{LlmError, LlmProvider, RetrySettings, TokenUsage};
use serde_json::json;

use crate::openai::{chat_reply, openai_client};
use crate::support::{Reply, TestServer, closed_port_url, extraction_messages, extraction_options, quick_retry};

#[tokio::test]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    // The 429 reports usage, as a metering proxy in front of a model might; it is summed.
    let rate_limited = Reply::json(
        429,
        json!({"error": {"type": "rate_limit_error"}, "usage": {"prompt_tokens": 7, "completion_tokens": 0}}),
    )
    .header("retry-after", "1");
    let server = TestServer::start(vec![rate_limited, chat_reply("[]", 12, 4)]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());
    let started = Instant::now();

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert!(started.elapsed() >= Duration::from_secs(1), "waited {:?}", started.elapsed());
    assert_eq!(completion.attempts, 2);
    assert_eq!(completion.usage, TokenUsage { prompt_tokens: 19, completion_tokens: 4 });
    let received = server.received();
    assert_eq!(received.len(), 2);
    let gap = received[1].at - received[0].at;
    assert!(gap >= Duration::from_secs(1), "the second attempt came {gap:?} after the first");
    assert!(gap < Duration::from_secs(3), "Retry-After replaces the backoff, gap {gap:?}");
}

#[tokio::test]
async fn retry_after_is_capped_at_max_delay() {
    let rate_limited = Reply::json(429, json!({"error": "slow down"})).header("retry-after", "30");
    let server = TestServer::start(vec![rate_limited, chat_reply("[]", 1, 1)]).await;
    let retry = RetrySettings { max_delay: Duration::from_millis(200), ..quick_retry() };
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), retry);
    let started = Instant::now();

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.attempts, 2);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[tokio::test]
async fn rate_limit_until_attempts_run_out_reports_retry_after() {
    let rate_limited = Reply::json(429, json!({"error": "slow down"})).header("retry-after", "0");
    let server = TestServer::start(vec![rate_limited]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("stays limited");

    assert_eq!(error, LlmError::RateLimited { retry_after: Some(Duration::ZERO) });
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let failure = Reply::json(500, json!({"error": {"message": "internal error"}}));
    let server = TestServer::start(vec![failure.clone(), failure, chat_reply("[]", 20, 5)]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let completion = client.complete(&extraction_messages(), &extraction_options()).await.expect("completes");

    assert_eq!(completion.content, "[]");
    assert_eq!(completion.attempts, 3);
    assert_eq!(completion.usage, TokenUsage { prompt_tokens: 20, completion_tokens: 5 });
    let received = server.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[0].body, received[2].body, "every attempt sends the same request");
}

#[tokio::test]
async fn server_errors_past_max_attempts_fail_with_the_last_status() {
    let server = TestServer::start(vec![Reply::raw(502, "bad gateway")]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("keeps failing");

    assert_eq!(error, LlmError::Server { status: 502 });
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn a_server_slower_than_the_timeout_times_out_after_max_attempts() {
    let server = TestServer::start(vec![chat_reply("[]", 1, 1).after(Duration::from_secs(10))]).await;
    let client = openai_client(&server.base_url, None, Duration::from_millis(200), quick_retry());
    let started = Instant::now();

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("times out");

    assert_eq!(error, LlmError::Timeout);
    assert_eq!(server.received().len(), 3);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(600), "three 200 ms attempts took only {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "each attempt is cut at the timeout, took {elapsed:?}");
}

#[tokio::test]
async fn a_bad_request_is_not_retried() {
    let rejected = Reply::json(400, json!({"error": {"message": "model 'nope' not found"}}));
    let server = TestServer::start(vec![rejected, chat_reply("[]", 1, 1)]).await;
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("rejected");

    let LlmError::Client { status, body } = &error else { panic!("expected a client error, got {error:?}") };
    assert_eq!(*status, 400);
    assert!(body.contains("model 'nope' not found"), "{body}");
    assert!(!error.is_retryable());
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_max_attempts() {
    let client = openai_client(&closed_port_url().await, None, Duration::from_secs(2), quick_retry());

    let error = client.complete(&extraction_messages(), &extraction_options()).await.expect_err("nothing listens");

    assert!(matches!(error, LlmError::Transport(_)), "{error:?}");
    assert!(error.is_retryable());
}
