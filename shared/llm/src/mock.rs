//! An OpenAI-compatible chat-completions server for load tests and end-to-end tests
//! (feature `mock`): `npcmem bench pipeline` measures the pipeline against it, and the
//! integration tests script failures with it. It answers `POST …/chat/completions` with
//! whatever its [`Responder`] decides, after an optional delay, and reports usage counted
//! by the same tokenizer the budgets use.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use npcmem_core::extraction::prompt::ChatMessage;
use npcmem_core::tokens::{count_chat_tokens, count_tokens};
use serde_json::{Value, json};

/// What the server sends back for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockReply {
    /// 200 with this assistant message content.
    Content(String),
    /// This status with a small JSON error body, and `Retry-After` seconds when given.
    Status { status: u16, retry_after_secs: Option<u64> },
    /// Never answers within any sane timeout.
    Hang,
}

/// Decides the reply from the request's chat messages.
pub type Responder = Arc<dyn Fn(&[ChatMessage]) -> MockReply + Send + Sync>;

/// A reply the extraction parser accepts: one trade memory.
pub const SAMPLE_EXTRACTION: &str = r#"[{"memory_type":"episodic","content":"The player bought a sword for 50 gold.","importance":0.5,"emotional_valence":"positive","emotional_intensity":0.3,"tags":["trade"]}]"#;

struct Shared {
    responder: RwLock<Responder>,
    delay: RwLock<Duration>,
    requests: AtomicU64,
    /// Bodies of received requests, when recording (tests); off for load tests.
    recorded: Option<Mutex<Vec<Value>>>,
}

/// A running mock; stops when dropped.
pub struct MockLlmServer {
    address: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl MockLlmServer {
    /// Starts on 127.0.0.1 (a free port), answering every request with `responder`.
    pub async fn start(responder: Responder, delay: Duration, record: bool) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::serve(listener, responder, delay, record)
    }

    /// Serves on `listener`.
    pub fn serve(
        listener: tokio::net::TcpListener,
        responder: Responder,
        delay: Duration,
        record: bool,
    ) -> std::io::Result<Self> {
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            responder: RwLock::new(responder),
            delay: RwLock::new(delay),
            requests: AtomicU64::new(0),
            recorded: record.then(|| Mutex::new(Vec::new())),
        });
        let router = Router::new().fallback(answer).with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::warn!(%error, "mock llm server stopped");
            }
        });
        Ok(Self { address, shared, task })
    }

    /// Answers every request with `content`.
    pub fn fixed(content: impl Into<String>) -> Responder {
        let content = content.into();
        Arc::new(move |_| MockReply::Content(content.clone()))
    }

    /// The base URL for an OpenAI-compatible client (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn set_responder(&self, responder: Responder) {
        *self.shared.responder.write().unwrap_or_else(PoisonError::into_inner) = responder;
    }

    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.write().unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Bodies received so far (empty unless started with `record`).
    pub fn recorded(&self) -> Vec<Value> {
        match &self.shared.recorded {
            Some(recorded) => recorded.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            None => Vec::new(),
        }
    }
}

impl Drop for MockLlmServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(_) => return (StatusCode::BAD_REQUEST, "request body is not json").into_response(),
    };
    let messages: Vec<ChatMessage> = serde_json::from_value(request["messages"].clone()).unwrap_or_default();
    if let Some(recorded) = &shared.recorded {
        recorded.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    }
    let responder = shared.responder.read().unwrap_or_else(PoisonError::into_inner).clone();
    let delay = *shared.delay.read().unwrap_or_else(PoisonError::into_inner);
    let reply = responder(&messages);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match reply {
        MockReply::Content(content) => {
            let usage = json!({
                "prompt_tokens": count_chat_tokens(&messages),
                "completion_tokens": count_tokens(&content),
            });
            let body = json!({
                "id": "mock",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": usage,
            });
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        MockReply::Status { status, retry_after_secs } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (status, axum::Json(json!({"error": {"message": "mock failure"}}))).into_response();
            if let Some(seconds) = retry_after_secs {
                response.headers_mut().insert("retry-after", HeaderValue::from(seconds));
            }
            response
        }
        MockReply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}
