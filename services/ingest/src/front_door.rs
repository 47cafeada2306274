//! The HTTP front door for game servers without a NATS client: `POST /v1/conversations`
//! and `POST /v1/world/{kind}` validate the body synchronously with the decoders the
//! consumers use — 400 with the same reason code the dead-letter stream would carry, 413
//! over the size limit — and only then publish the body as received to its subject with
//! a `Nats-Msg-Id`, answering 202 once JetStream has stored it. Posting the same message
//! twice publishes it once (inside the duplicate window; ingest's ledger after that).

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use npcmem_bus::Topology;
use npcmem_core::validate::world::decode_world;
use npcmem_core::validate::{ConversationLimits, ValidationError, decode_conversation_ended, decode_message};
use npcmem_core::wire::{ErrorReply, NpcMoved, NpcProfile, Observation, PlayerPrivacy, WorldFact};
use serde_json::json;
use tracing::warn;
use uuid::Uuid;

/// World messages are small; the gossip consumer refuses more than this.
const MAX_WORLD_BYTES: usize = 256 * 1024;
/// Ids of world messages that carry none of their own: name-based over the body, so the
/// same body posted twice is one message.
const WORLD_NAMESPACE: Uuid = Uuid::from_u128(0x6a2e_51c4_8f0b_4c7e_a0d3_2b9f_7e41_c5d8);

struct FrontDoor {
    js: async_nats::jetstream::Context,
    topology: Topology,
    limits: ConversationLimits,
}

pub fn routes(js: async_nats::jetstream::Context, topology: Topology, limits: ConversationLimits) -> Router {
    let conversation_limit = limits.max_payload_bytes;
    let door = Arc::new(FrontDoor { js, topology, limits });
    let conversations = Router::new()
        .route("/v1/conversations", post(conversation))
        // One byte over the limit is enough to know; the rejection becomes the JSON 413.
        .layer(DefaultBodyLimit::max(conversation_limit + 1))
        .with_state(door.clone());
    let world = Router::new()
        .route("/v1/world/{kind}", post(world))
        .layer(DefaultBodyLimit::max(MAX_WORLD_BYTES + 1))
        .with_state(door);
    conversations.merge(world)
}

async fn conversation(State(door): State<Arc<FrontDoor>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return rejected(rejection, door.limits.max_payload_bytes),
    };
    let conversation = match decode_conversation_ended(&body, &door.limits) {
        Ok(conversation) => conversation,
        Err(error) => return invalid(error),
    };
    let id = conversation.conversation_id;
    let subject = door.topology.conversation_ended();
    publish(&door, &subject, &id.to_string(), body, json!({"conversation_id": id})).await
}

async fn world(
    State(door): State<Arc<FrontDoor>>,
    Path(kind): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return rejected(rejection, MAX_WORLD_BYTES),
    };
    // The message's own id where it has one, else one derived from the body.
    let own_id: Result<Option<Uuid>, ValidationError> = match kind.as_str() {
        "npc_moved" => decode_world::<NpcMoved>(&body, MAX_WORLD_BYTES).map(|_| None),
        "npc_profile" => decode_world::<NpcProfile>(&body, MAX_WORLD_BYTES).map(|_| None),
        "observation" => decode_world::<Observation>(&body, MAX_WORLD_BYTES).map(|o| Some(o.observation_id)),
        "fact" => decode_world::<WorldFact>(&body, MAX_WORLD_BYTES).map(|f| Some(f.fact_id)),
        "player_privacy" => decode_message::<PlayerPrivacy>(&body, door.limits.max_payload_bytes).map(|_| None),
        _ => {
            let message =
                format!("no world message {kind:?}; kinds: npc_moved, npc_profile, observation, fact, player_privacy");
            return (StatusCode::NOT_FOUND, axum::Json(ErrorReply::new("not_found", message))).into_response();
        }
    };
    let msg_id = match own_id {
        Ok(Some(id)) => format!("{kind}-{id}"),
        Ok(None) => format!("{kind}-{}", Uuid::new_v5(&WORLD_NAMESPACE, &body)),
        Err(error) => return invalid(error),
    };
    let subject = door.topology.subject(&format!("world.{kind}"));
    publish(&door, &subject, &msg_id.clone(), body, json!({"msg_id": msg_id})).await
}

async fn publish(door: &FrontDoor, subject: &str, msg_id: &str, body: Bytes, accepted: serde_json::Value) -> Response {
    match npcmem_bus::publish::publish_with_id(&door.js, subject, msg_id, None, body).await {
        Ok(duplicate) => {
            let mut reply = accepted;
            reply["duplicate"] = duplicate.into();
            (StatusCode::ACCEPTED, axum::Json(reply)).into_response()
        }
        Err(error) => {
            warn!(%error, %subject, "front door publish failed");
            let reply = ErrorReply::new("unavailable", format!("the message could not be stored: {error}"));
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(reply)).into_response()
        }
    }
}

fn invalid(error: ValidationError) -> Response {
    let status = if error.code == npcmem_core::validate::ReasonCode::PayloadTooLarge {
        StatusCode::PAYLOAD_TOO_LARGE
    } else {
        StatusCode::BAD_REQUEST
    };
    (status, axum::Json(ErrorReply::from(error))).into_response()
}

fn rejected(rejection: BytesRejection, limit: usize) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        let reply = ErrorReply::new("payload_too_large", format!("the request body is larger than {limit} bytes"));
        return (StatusCode::PAYLOAD_TOO_LARGE, axum::Json(reply)).into_response();
    }
    (StatusCode::BAD_REQUEST, axum::Json(ErrorReply::new("invalid_body", rejection.body_text()))).into_response()
}
