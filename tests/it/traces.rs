//! OpenTelemetry traces over OTLP/HTTP: one conversation's spans in ingest, extract and
//! relate, each service a real process exporting to a collector this test runs, form one
//! trace that continues the game server's `traceparent`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::process::ServiceProcess;
use npcmem_tests::{TestEnv, wait_until};
use serde_json::Value;
use uuid::Uuid;

/// The spans an OTLP/HTTP JSON collector received: (service, span) pairs.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Collector {
    async fn start(self) -> u16 {
        let spans = self.spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let spans = spans.clone();
                async move {
                    let request: Value = serde_json::from_slice(&body).expect("OTLP/HTTP JSON");
                    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                        let service = attribute(&resource["resource"], "service.name").unwrap_or_default();
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            for span in scope["spans"].as_array().into_iter().flatten() {
                                spans.lock().unwrap().push((service.clone(), span.clone()));
                            }
                        }
                    }
                    "{}"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        port
    }

    /// The span `service` recorded for `conversation_id`, if it arrived.
    fn span_of(&self, service: &str, conversation_id: Uuid) -> Option<Value> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .find(|(from, span)| {
                from == service && attribute(span, "conversation_id").as_deref() == Some(&conversation_id.to_string())
            })
            .map(|(_, span)| span.clone())
    }
}

fn attribute(holder: &Value, key: &str) -> Option<String> {
    holder["attributes"]
        .as_array()?
        .iter()
        .find(|attribute| attribute["key"] == key)
        .and_then(|attribute| attribute["value"]["stringValue"].as_str())
        .map(str::to_owned)
}

fn id(span: &Value, field: &str) -> String {
    span[field].as_str().unwrap_or_default().to_lowercase()
}

#[tokio::test]
async fn one_conversation_is_one_trace_from_ingest_through_extract_to_relate() {
    let env = TestEnv::new().await;
    let collector = Collector::default();
    let port = collector.clone().start().await;
    let mut args = env.common_args();
    args.extend(["--otlp-endpoint".to_owned(), format!("http://127.0.0.1:{port}")]);
    let services = [
        ("npcmem-ingest", env!("CARGO_BIN_EXE_it-npcmem-ingest")),
        ("npcmem-extract", env!("CARGO_BIN_EXE_it-npcmem-extract")),
        ("npcmem-relate", env!("CARGO_BIN_EXE_it-npcmem-relate")),
    ]
    .map(|(name, binary)| (name, ServiceProcess::spawn(binary, &args)));

    // The game server's own trace: ingest's span is its child.
    let (game_trace, game_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", format!("00-{game_trace}-{game_span}-01").as_str());
    let conversation_id = Uuid::new_v4();
    let document = fixtures::trade_conversation(conversation_id, &Pair::new());
    env.publish_with_headers(&env.subject("conversation.ended"), fixtures::bytes(&document), None, Some(headers)).await;
    wait_until(Duration::from_secs(60), "relate applied the conversation", || async {
        env.count("SELECT count(*) FROM applied_conversations").await == 1
    })
    .await;
    // A stopping service flushes the spans it still holds.
    for (name, process) in services {
        assert!(process.terminate().await.success(), "{name} exits cleanly");
    }
    wait_until(Duration::from_secs(10), "the three services' spans arrived", || async {
        ["npcmem-ingest", "npcmem-extract", "npcmem-relate"]
            .iter()
            .all(|service| collector.span_of(service, conversation_id).is_some())
    })
    .await;

    let ingest = collector.span_of("npcmem-ingest", conversation_id).unwrap();
    let extract = collector.span_of("npcmem-extract", conversation_id).unwrap();
    let relate = collector.span_of("npcmem-relate", conversation_id).unwrap();
    assert_eq!(ingest["name"], "ingest conversation", "{ingest}");
    assert_eq!(extract["name"], "extract conversation", "{extract}");
    assert_eq!(relate["name"], "relate conversation", "{relate}");
    for span in [&ingest, &extract, &relate] {
        assert_eq!(id(span, "traceId"), game_trace, "one trace, the game server's: {span}");
    }
    assert_eq!(id(&ingest, "parentSpanId"), game_span, "ingest continues the game server's span");
    assert_eq!(id(&extract, "parentSpanId"), id(&ingest, "spanId"), "extract follows ingest");
    assert_eq!(id(&relate, "parentSpanId"), id(&extract, "spanId"), "relate follows extract");
    env.cleanup().await;
}
