use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use npcmem_llm::{BreakerMetrics, BreakerSettings, BreakerState, CircuitBreaker, LlmError, LlmProvider, RetrySettings};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::oneshot;

use crate::openai::openai_client;
use crate::support::{Reply, TestServer, extraction_messages, extraction_options};

const COOL_DOWN: Duration = Duration::from_secs(30);

fn breaker(failure_threshold: u32) -> CircuitBreaker {
    CircuitBreaker::new("openai", BreakerSettings { failure_threshold, cool_down: COOL_DOWN })
}

async fn failing_call(breaker: &CircuitBreaker, invoked: &AtomicU32) -> Result<(), LlmError> {
    breaker
        .call(|| {
            invoked.fetch_add(1, Ordering::SeqCst);
            async { Err(LlmError::Server { status: 503 }) }
        })
        .await
}

async fn succeeding_call(breaker: &CircuitBreaker, invoked: &AtomicU32) -> Result<(), LlmError> {
    breaker
        .call(|| {
            invoked.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .await
}

async fn open(breaker: &CircuitBreaker, failure_threshold: u32) {
    let invoked = AtomicU32::new(0);
    for _ in 0..failure_threshold {
        assert_eq!(failing_call(breaker, &invoked).await, Err(LlmError::Server { status: 503 }));
    }
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn breaker_opens_after_consecutive_failures_and_rejects_without_calling() {
    let breaker = breaker(3);
    let invoked = AtomicU32::new(0);

    for _ in 0..2 {
        failing_call(&breaker, &invoked).await.expect_err("fails");
    }
    assert_eq!(breaker.state(), BreakerState::Closed, "two failures stay below the threshold");
    failing_call(&breaker, &invoked).await.expect_err("fails");
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(invoked.load(Ordering::SeqCst), 3);

    assert_eq!(succeeding_call(&breaker, &invoked).await, Err(LlmError::CircuitOpen));
    assert_eq!(failing_call(&breaker, &invoked).await, Err(LlmError::CircuitOpen));
    assert_eq!(invoked.load(Ordering::SeqCst), 3, "an open breaker never calls the provider");
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_failure_count() {
    let breaker = breaker(3);
    let invoked = AtomicU32::new(0);

    for _ in 0..2 {
        failing_call(&breaker, &invoked).await.expect_err("fails");
    }
    succeeding_call(&breaker, &invoked).await.expect("succeeds");
    for _ in 0..2 {
        failing_call(&breaker, &invoked).await.expect_err("fails");
    }

    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn breaker_half_opens_after_the_cool_down_lets_one_probe_and_closes_on_success() {
    let breaker = Arc::new(breaker(2));
    open(&breaker, 2).await;

    tokio::time::advance(COOL_DOWN - Duration::from_secs(1)).await;
    assert_eq!(breaker.state(), BreakerState::Open, "still cooling down");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(breaker.state(), BreakerState::HalfOpen);

    let (probe_started, probe_running) = oneshot::channel::<()>();
    let (finish_probe, probe_result) = oneshot::channel::<Result<&'static str, LlmError>>();
    let probe = tokio::spawn({
        let breaker = breaker.clone();
        async move {
            breaker
                .call(|| async move {
                    probe_started.send(()).expect("the test waits for the probe");
                    probe_result.await.expect("the test finishes the probe")
                })
                .await
        }
    });
    probe_running.await.expect("the probe started");

    let bystander = AtomicU32::new(0);
    assert_eq!(succeeding_call(&breaker, &bystander).await, Err(LlmError::CircuitOpen));
    assert_eq!(bystander.load(Ordering::SeqCst), 0, "only one probe at a time");
    assert_eq!(breaker.state(), BreakerState::HalfOpen);

    finish_probe.send(Ok("probe reply")).expect("the probe waits");
    assert_eq!(probe.await.expect("probe task"), Ok("probe reply"));
    assert_eq!(breaker.state(), BreakerState::Closed);

    succeeding_call(&breaker, &bystander).await.expect("closed again");
    assert_eq!(bystander.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_another_cool_down() {
    let breaker = breaker(2);
    open(&breaker, 2).await;
    tokio::time::advance(COOL_DOWN).await;

    let invoked = AtomicU32::new(0);
    assert_eq!(failing_call(&breaker, &invoked).await, Err(LlmError::Server { status: 503 }));
    assert_eq!(invoked.load(Ordering::SeqCst), 1, "the probe reached the provider");
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(succeeding_call(&breaker, &invoked).await, Err(LlmError::CircuitOpen));

    tokio::time::advance(COOL_DOWN).await;
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    succeeding_call(&breaker, &invoked).await.expect("second probe succeeds");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_the_probe_slot() {
    let breaker = breaker(1);
    open(&breaker, 1).await;
    tokio::time::advance(COOL_DOWN).await;

    let never_answers = breaker.call(std::future::pending::<Result<(), LlmError>>);
    tokio::time::timeout(Duration::from_secs(1), never_answers).await.expect_err("the probe is cut off");
    assert_eq!(breaker.state(), BreakerState::HalfOpen);

    let invoked = AtomicU32::new(0);
    succeeding_call(&breaker, &invoked).await.expect("the next call probes");
    assert_eq!(invoked.load(Ordering::SeqCst), 1);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_from_before_the_breaker_opened_does_not_close_it() {
    let breaker = Arc::new(breaker(1));
    let (finish_slow_call, slow_result) = oneshot::channel::<Result<(), LlmError>>();
    let (slow_started, slow_running) = oneshot::channel::<()>();
    let slow_call = tokio::spawn({
        let breaker = breaker.clone();
        async move {
            breaker
                .call(|| async move {
                    slow_started.send(()).expect("the test waits");
                    slow_result.await.expect("the test finishes it")
                })
                .await
        }
    });
    slow_running.await.expect("the slow call started");

    open(&breaker, 1).await;
    finish_slow_call.send(Ok(())).expect("the slow call waits");
    slow_call.await.expect("slow task").expect("the slow call itself succeeded");

    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn breaker_metrics_report_state_and_outcomes() {
    let mut registry = Registry::default();
    let metrics = BreakerMetrics::register(&mut registry);
    let breaker = breaker(2).with_metrics(metrics);
    let invoked = AtomicU32::new(0);
    let encoded = |registry: &Registry| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    };
    assert!(encoded(&registry).contains("npcmem_llm_breaker_state{provider=\"openai\"} 0\n"));

    succeeding_call(&breaker, &invoked).await.expect("succeeds");
    failing_call(&breaker, &invoked).await.expect_err("fails");
    failing_call(&breaker, &invoked).await.expect_err("fails");
    failing_call(&breaker, &invoked).await.expect_err("rejected");
    let text = encoded(&registry);
    assert!(text.contains("npcmem_llm_breaker_state{provider=\"openai\"} 2\n"), "{text}");
    assert!(text.contains("npcmem_llm_calls_total{provider=\"openai\",outcome=\"success\"} 1\n"), "{text}");
    assert!(text.contains("npcmem_llm_calls_total{provider=\"openai\",outcome=\"server_error\"} 2\n"), "{text}");
    assert!(text.contains("npcmem_llm_calls_total{provider=\"openai\",outcome=\"circuit_open\"} 1\n"), "{text}");

    tokio::time::advance(COOL_DOWN).await;
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert!(encoded(&registry).contains("npcmem_llm_breaker_state{provider=\"openai\"} 1\n"));
}

#[tokio::test]
async fn a_breaker_around_a_failing_client_stops_calling_it() {
    let server = TestServer::start(vec![Reply::json(503, json!({"error": "down"}))]).await;
    let no_retry = RetrySettings { max_attempts: 1, ..RetrySettings::default() };
    let client = openai_client(&server.base_url, None, Duration::from_secs(5), no_retry);
    let breaker = CircuitBreaker::new(client.name(), BreakerSettings { failure_threshold: 2, cool_down: COOL_DOWN });
    let messages = extraction_messages();
    let options = extraction_options();

    let mut errors = Vec::new();
    for _ in 0..4 {
        errors.push(breaker.call(|| client.complete(&messages, &options)).await.expect_err("down"));
    }

    assert_eq!(
        errors,
        vec![
            LlmError::Server { status: 503 },
            LlmError::Server { status: 503 },
            LlmError::CircuitOpen,
            LlmError::CircuitOpen
        ]
    );
    assert_eq!(server.received().len(), 2);
}
