//! The request/reply endpoints: core NATS with queue group `enrich` (replicas share the
//! load) for `P.enrich.request` and `P.query.*`, and `POST /v1/context` over HTTP.
//! Every request gets an answer: the reply, or `{"error":{"code","message"}}`.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use npcmem_core::relationship::RelateRules;
use npcmem_core::validate::decode_message;
use npcmem_core::wire::{EnrichRequest, ErrorReply};
use npcmem_store::PgPool;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::config::MAX_TOKENS_RANGE;
use crate::enricher::Enricher;
use crate::query;

/// Requests are small; anything larger is refused as `payload_too_large`.
const MAX_REQUEST_BYTES: usize = 64 * 1024;
pub const QUEUE_GROUP: &str = "enrich";

/// The request kinds, by subject.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint {
    Context,
    Relationship,
    Memories,
    Knowledge,
    Recall,
}

pub struct Handlers {
    pub enricher: Arc<Enricher>,
    pub pool: PgPool,
    pub rules: RelateRules,
}

impl Handlers {
    /// The JSON reply to `payload`, or the error to send instead.
    pub async fn answer(&self, endpoint: Endpoint, payload: &[u8]) -> Result<Vec<u8>, ErrorReply> {
        match endpoint {
            Endpoint::Context => self.context(payload).await,
            Endpoint::Relationship => {
                run(payload, |q: npcmem_core::wire::RelationshipQuery| async move {
                    query::relationship(&self.pool, &self.rules, &q).await
                })
                .await
            }
            Endpoint::Memories => {
                run(payload, |q: npcmem_core::wire::MemoriesQuery| async move { query::memories(&self.pool, &q).await })
                    .await
            }
            Endpoint::Knowledge => {
                run(
                    payload,
                    |q: npcmem_core::wire::KnowledgeQuery| async move { query::knowledge(&self.pool, &q).await },
                )
                .await
            }
            Endpoint::Recall => self.recall(payload).await,
        }
    }

    async fn recall(&self, payload: &[u8]) -> Result<Vec<u8>, ErrorReply> {
        let query: npcmem_core::wire::RecallQuery =
            decode_message(payload, MAX_REQUEST_BYTES).map_err(ErrorReply::from)?;
        query.check()?;
        let answer =
            query::recall(&self.pool, self.enricher.loader.recall_max_turns, self.enricher.embedder.as_ref(), &query)
                .await
                .map_err(|error| {
                    warn!(%error, "recall query failed");
                    ErrorReply::new("unavailable", format!("the store could not answer: {error}"))
                })?;
        Ok(serde_json::to_vec(&answer).expect("answers serialise"))
    }

    async fn context(&self, payload: &[u8]) -> Result<Vec<u8>, ErrorReply> {
        let request: EnrichRequest = decode_message(payload, MAX_REQUEST_BYTES).map_err(ErrorReply::from)?;
        if let Some(max_tokens) = request.max_tokens
            && !MAX_TOKENS_RANGE.contains(&max_tokens)
        {
            return Err(ErrorReply::at_field(
                "invalid_field",
                "max_tokens",
                format!("max_tokens {max_tokens} is outside {}..={}", MAX_TOKENS_RANGE.start(), MAX_TOKENS_RANGE.end()),
            ));
        }
        let reply =
            self.enricher.enrich(&request).await.map_err(|e| ErrorReply::at_field(e.code, "max_tokens", e.message))?;
        Ok(serde_json::to_vec(&reply).expect("replies serialise"))
    }
}

async fn run<Q, A, F, Fut>(payload: &[u8], handle: F) -> Result<Vec<u8>, ErrorReply>
where
    Q: DeserializeOwned,
    A: Serialize,
    F: FnOnce(Q) -> Fut,
    Fut: std::future::Future<Output = Result<A, npcmem_store::StoreError>>,
{
    let query: Q = decode_message(payload, MAX_REQUEST_BYTES).map_err(ErrorReply::from)?;
    let answer = handle(query).await.map_err(|error| {
        warn!(%error, "query failed");
        ErrorReply::new("unavailable", format!("the store could not answer: {error}"))
    })?;
    Ok(serde_json::to_vec(&answer).expect("answers serialise"))
}

/// Serves one subject until `shutdown`; each request is handled on its own task.
pub async fn serve_subject(
    nats: async_nats::Client,
    subject: String,
    endpoint: Endpoint,
    handlers: Arc<Handlers>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), async_nats::SubscribeError> {
    let mut subscription = nats.queue_subscribe(subject.clone(), QUEUE_GROUP.to_owned()).await?;
    loop {
        let message = tokio::select! {
            message = subscription.next() => match message { Some(message) => message, None => break },
            _ = shutdown.changed() => break,
        };
        let Some(reply) = message.reply.clone() else {
            debug!(%subject, "request without a reply subject ignored");
            continue;
        };
        let (nats, handlers) = (nats.clone(), handlers.clone());
        tokio::spawn(async move {
            let body = handlers
                .answer(endpoint, &message.payload)
                .await
                .unwrap_or_else(|error| serde_json::to_vec(&error).expect("errors serialise"));
            if let Err(error) = nats.publish(reply, body.into()).await {
                debug!(%error, "reply publish failed");
            }
        });
    }
    let _ = subscription.unsubscribe().await;
    Ok(())
}

/// `POST /v1/context` (the enrich request) and `POST /v1/recall` (`query.recall`) over
/// HTTP: errors are the same object as over NATS, with 400 for bad input, 413 for a body
/// over the limit and 503 when the store cannot answer.
pub fn routes(handlers: Arc<Handlers>) -> axum::Router {
    axum::Router::new()
        .route("/v1/context", axum::routing::post(http_context))
        .route("/v1/recall", axum::routing::post(http_recall))
        // One byte over the limit is enough to know; the rejection becomes the JSON 413.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BYTES + 1))
        .with_state(handlers)
}

async fn http_context(State(handlers): State<Arc<Handlers>>, body: Result<Bytes, BytesRejection>) -> Response {
    http_answer(&handlers, Endpoint::Context, body).await
}

async fn http_recall(State(handlers): State<Arc<Handlers>>, body: Result<Bytes, BytesRejection>) -> Response {
    http_answer(&handlers, Endpoint::Recall, body).await
}

async fn http_answer(handlers: &Handlers, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let answer = match body {
        Ok(body) => handlers.answer(endpoint, &body).await,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ErrorReply::new(
            "payload_too_large",
            format!("the request body is larger than {MAX_REQUEST_BYTES} bytes"),
        )),
        Err(rejection) => Err(ErrorReply::new("invalid_body", rejection.body_text())),
    };
    match answer {
        Ok(reply) => (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/json")], reply).into_response(),
        Err(error) => {
            let status = match error.error.code.as_str() {
                "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
                "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, axum::Json(error)).into_response()
        }
    }
}
