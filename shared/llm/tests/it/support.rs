//! A scripted HTTP server standing in for an LLM provider: it records every request and
//! answers the n-th with the n-th scripted reply (the last one repeats).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use npcmem_llm::{ChatMessage, ChatRole, CompletionOptions, RetrySettings};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Reply {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, body.to_string()).header("content-type", "application/json")
    }

    pub fn raw(status: u16, body: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).expect("a valid status in a test script"),
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Answers only after `delay`, to outlast a client timeout.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the client sends json")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

#[derive(Default)]
struct Script {
    replies: Vec<Reply>,
    received: Vec<Received>,
}

pub struct TestServer {
    pub base_url: String,
    script: Arc<Mutex<Script>>,
}

impl TestServer {
    pub async fn start(replies: Vec<Reply>) -> Self {
        assert!(!replies.is_empty(), "a test server needs at least one reply");
        let script = Arc::new(Mutex::new(Script { replies, received: Vec::new() }));
        let router = Router::new().fallback(answer).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let address = listener.local_addr().expect("a bound listener has an address");
        tokio::spawn(async move {
            axum::serve(listener, router).await.expect("test server runs");
        });
        Self { base_url: format!("http://{address}"), script }
    }

    pub fn received(&self) -> Vec<Received> {
        self.script.lock().expect("not poisoned").received.clone()
    }
}

async fn answer(
    State(script): State<Arc<Mutex<Script>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = {
        let mut script = script.lock().expect("not poisoned");
        script.received.push(Received { method, path: uri.path().to_owned(), headers, body, at: Instant::now() });
        let index = (script.received.len() - 1).min(script.replies.len() - 1);
        script.replies[index].clone()
    };
    tokio::time::sleep(reply.delay).await;
    let mut response = (reply.status, reply.body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(&value).expect("a valid header value in a test script"),
        );
    }
    response
}

/// An address nothing listens on: bound once, then released.
pub async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let address = listener.local_addr().expect("a bound listener has an address");
    drop(listener);
    format!("http://{address}")
}

/// Retries fast enough for a test, still more than one attempt.
pub fn quick_retry() -> RetrySettings {
    RetrySettings { max_attempts: 3, initial_delay: Duration::from_millis(10), max_delay: Duration::from_secs(5) }
}

pub fn extraction_messages() -> Vec<ChatMessage> {
    vec![
        ChatMessage { role: ChatRole::System, content: "Return a JSON array of memories.".into() },
        ChatMessage { role: ChatRole::User, content: "Aria: I need a sword.\nBrom: That'll be 50 gold.".into() },
    ]
}

pub fn extraction_options() -> CompletionOptions {
    CompletionOptions { temperature: 0.3, max_tokens: 500, json_mode: true }
}
