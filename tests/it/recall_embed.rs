//! Recall with an embedder: extract stores vectors of each conversation's
//! turns, enrich fuses dense similarity with the lexical ranking, an embedder that fails
//! or is slow leaves recall lexical and named in `degraded`, and `npcmem recall backfill`
//! embeds history recorded before. The embedder is a real HTTP server on 127.0.0.1
//! speaking the OpenAI `/v1/embeddings` protocol, with a small vocabulary of synonyms as
//! its "model", so a question in other words is near its answer only by meaning.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use npcmem_tests::fixtures::{self, Pair};
use npcmem_tests::{InProcessService, TestEnv, wait_until};
use serde_json::{Value, json};

use crate::cli::npcmem;

const WAIT: Duration = Duration::from_secs(30);
const MODEL: &str = "synonyms-16";

/// Words of one meaning share a dimension; any other word lands, by its length and first
/// letter, on one of the last eight.
const CONCEPTS: &[&[&str]] = &[
    &["brother", "sibling", "sister", "kin"],
    &["vanished", "missing", "disappeared", "gone", "lost"],
    &["amulet", "pendant", "necklace", "charm"],
    &["wolves", "beasts", "pack", "hounds"],
];

fn embed_text(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0_f32; 16];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        match CONCEPTS.iter().position(|concept| concept.contains(&word.as_str())) {
            Some(dimension) => vector[dimension] += 1.0,
            None => vector[8 + (word.len() + usize::from(word.as_bytes()[0])) % 8] += 0.2,
        }
    }
    vector
}

#[derive(Default)]
struct Behaviour {
    failing: AtomicBool,
    delay_ms: AtomicU64,
    requests: AtomicU64,
}

struct EmbeddingServer {
    address: SocketAddr,
    behaviour: Arc<Behaviour>,
    task: tokio::task::JoinHandle<()>,
}

impl EmbeddingServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let address = listener.local_addr().unwrap();
        let behaviour = Arc::new(Behaviour::default());
        let router =
            axum::Router::new().route("/v1/embeddings", axum::routing::post(answer)).with_state(behaviour.clone());
        let task = tokio::spawn(async move {
            let _stopped = axum::serve(listener, router).await;
        });
        Self { address, behaviour, task }
    }

    fn args(&self) -> Vec<String> {
        [
            "--embed-provider",
            "openai",
            "--embed-base-url",
            &format!("http://{}/v1", self.address),
            "--embed-model",
            MODEL,
            "--embed-query-timeout-ms",
            "200",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect()
    }
}

impl Drop for EmbeddingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(State(behaviour): State<Arc<Behaviour>>, Json(body): Json<Value>) -> Response {
    behaviour.requests.fetch_add(1, Ordering::SeqCst);
    let delay = behaviour.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if behaviour.failing.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": {"message": "overloaded"}}))).into_response();
    }
    if body["model"] != MODEL {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": {"message": "unknown model"}}))).into_response();
    }
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| json!({"object": "embedding", "index": index, "embedding": embed_text(input.as_str().unwrap_or(""))}))
        .collect();
    Json(json!({"object": "list", "model": MODEL, "data": data})).into_response()
}

/// 30 conversations of small talk, and one 95 days ago where the player said the line
/// the tests ask about in other words.
async fn record_history(env: &TestEnv, pair: &Pair) -> i64 {
    let mut documents = vec![fixtures::conversation_at(
        pair,
        95,
        &["My sibling vanished near the old mill last spring.", "I will keep my ears open."],
    )];
    for days_ago in (1..=30).rev() {
        documents.push(fixtures::conversation_at(
            pair,
            days_ago * 3,
            &["Good morning, how is the forge today?", "Hot as ever. Buying or browsing?"],
        ));
    }
    for (id, document) in &documents {
        env.publish(&env.subject("conversation.ended"), fixtures::bytes(document), Some(&id.to_string())).await;
    }
    documents.len() as i64
}

/// The embedder, ingest and extract running with it, and one pair's history embedded.
struct History {
    server: EmbeddingServer,
    args: Vec<String>,
    ingest: InProcessService,
    extract: InProcessService,
    pair: Pair,
    conversations: i64,
}

async fn embedded_history(env: &TestEnv) -> History {
    let server = EmbeddingServer::start().await;
    let args = server.args();
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let pair = Pair::new();
    let conversations = record_history(env, &pair).await;
    wait_until(WAIT, "every conversation embedded", || async {
        env.count("SELECT count(*) FROM conversation_embeddings").await >= conversations
    })
    .await;
    History { server, args, ingest, extract, pair, conversations }
}

fn ask(pair: &Pair, message: &str) -> Value {
    json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "message": message, "max_tokens": 512})
}

fn recall_section(reply: &Value) -> Option<String> {
    reply["sections"].as_array()?.iter().find(|s| s["provider"] == "recall")?["content"].as_str().map(str::to_owned)
}

/// No word of the question is in the answer: only the embedder can find it.
async fn ask_loaded(env: &TestEnv, pair: &Pair, question: &str) -> Value {
    env.enrich_loaded(&ask(pair, question), &["embedder"]).await
}

const QUESTION: &str = "Any word about my brother who disappeared?";
const ANSWER: &str = "My sibling vanished near the old mill last spring.";

#[tokio::test]
async fn a_question_in_other_words_finds_its_turn_through_the_embedder() {
    let env = TestEnv::new().await;
    let History { server: _server, args, ingest, extract, pair, conversations } = embedded_history(&env).await;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rows =
        env.count("SELECT count(*) FROM conversation_embeddings WHERE model = 'synonyms-16' AND dims = 16").await;
    assert_eq!(rows, conversations, "one row per conversation, of the configured model");

    // Without an embedder, enrich finds nothing: the words differ.
    let lexical = env.spawn_enrich(&[]);
    let reply = ask_loaded(&env, &pair, QUESTION).await;
    assert!(!recall_section(&reply).unwrap_or_default().contains(ANSWER), "lexical alone cannot: {reply}");
    lexical.stop().await;

    let enrich = env.spawn_enrich(&args);
    let reply = ask_loaded(&env, &pair, QUESTION).await;
    let recall = recall_section(&reply).unwrap_or_else(|| panic!("a recall section: {reply}"));
    assert!(recall.contains(ANSWER), "{recall}");
    assert!(recall.contains("3 months ago, on "), "{recall}");
    assert_eq!(reply["degraded"], json!([]), "{reply}");

    // query.recall fuses the same way.
    let answer = env
        .request_json(
            "query.recall",
            &json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "text": QUESTION, "limit": 3}),
        )
        .await;
    assert_eq!(answer["turns"][0]["text"], ANSWER, "{answer}");
    assert_eq!(answer["degraded"], json!([]), "{answer}");
    for service in [ingest, extract, enrich] {
        service.stop().await;
    }
    env.cleanup().await;
}

#[tokio::test]
async fn an_embedder_down_or_slow_leaves_recall_lexical_and_named_in_degraded() {
    let env = TestEnv::new().await;
    let History { server, args, ingest, extract, pair, .. } = embedded_history(&env).await;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let enrich = env.spawn_enrich(&args);
    let lexical_question = "What happened near the old mill?";

    server.behaviour.failing.store(true, Ordering::SeqCst);
    let reply = ask_loaded(&env, &pair, lexical_question).await;
    assert!(recall_section(&reply).unwrap_or_default().contains(ANSWER), "lexical still finds it: {reply}");
    assert_eq!(reply["degraded"], json!(["embedder"]), "{reply}");

    server.behaviour.failing.store(false, Ordering::SeqCst);
    server.behaviour.delay_ms.store(2_000, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let reply = env.request_json("enrich.request", &ask(&pair, lexical_question)).await;
    assert!(started.elapsed() < Duration::from_millis(1_500), "the query timeout (200 ms) bounds the wait");
    assert!(recall_section(&reply).unwrap_or_default().contains(ANSWER), "{reply}");
    assert_eq!(reply["degraded"], json!(["embedder"]), "{reply}");
    let answer = env
        .request_json(
            "query.recall",
            &json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "text": lexical_question}),
        )
        .await;
    assert_eq!(answer["turns"][0]["text"], ANSWER, "{answer}");
    assert_eq!(answer["degraded"], json!(["embedder"]), "{answer}");

    // Back to normal: nothing degraded.
    server.behaviour.delay_ms.store(0, Ordering::SeqCst);
    let reply = env.request_json("enrich.request", &ask(&pair, lexical_question)).await;
    assert_eq!(reply["degraded"], json!([]), "{reply}");
    for service in [ingest, extract, enrich] {
        service.stop().await;
    }
    env.cleanup().await;
}

#[tokio::test]
async fn backfill_embeds_history_recorded_before_once_and_forget_removes_vectors() {
    let env = TestEnv::new().await;
    let server = EmbeddingServer::start().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let pair = Pair::new();
    let conversations = record_history(&env, &pair).await;
    wait_until(WAIT, "every conversation extracted", || async {
        env.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await >= conversations
    })
    .await;
    assert_eq!(env.count("SELECT count(*) FROM conversation_embeddings").await, 0, "extract had no embedder");

    let mut args: Vec<String> = vec!["recall".into(), "backfill".into()];
    args.extend(server.args());
    args.extend(["--embed-batch".to_owned(), "7".to_owned(), "--page".to_owned(), "5".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = npcmem(&env, &args).await;
    outcome.assert_ok();
    let summary = outcome.json();
    assert_eq!(summary["conversations"], conversations, "{summary}");
    assert_eq!(summary["turns"], conversations * 2, "{summary}");
    assert_eq!(env.count("SELECT count(*) FROM conversation_embeddings").await, conversations);

    let again = npcmem(&env, &args).await;
    again.assert_ok();
    assert_eq!(again.json()["conversations"], 0, "a second run has nothing to do");

    // A failing embedder: the command fails loudly, nothing half-written.
    server.behaviour.failing.store(true, Ordering::SeqCst);
    let other = Pair::new();
    let more = record_history(&env, &other).await;
    wait_until(WAIT, "the other pair extracted", || async {
        env.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await >= conversations + more
    })
    .await;
    let failed = npcmem(&env, &args).await;
    assert_ne!(failed.code, npcmem_cli::exit_code::OK, "{}", failed.stdout);
    assert!(failed.error.contains("embedder"), "{}", failed.error);
    assert_eq!(env.count("SELECT count(*) FROM conversation_embeddings").await, conversations);

    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, pair.player_id, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    assert_eq!(env.count("SELECT count(*) FROM conversation_embeddings").await, 0, "forgotten with the player");
    for service in [ingest, extract] {
        service.stop().await;
    }
    env.cleanup().await;
}

#[tokio::test]
async fn extraction_goes_on_while_a_slow_embedder_falls_behind_and_the_backfill_catches_up() {
    let env = TestEnv::new().await;
    let server = EmbeddingServer::start().await;
    server.behaviour.delay_ms.store(3_000, Ordering::SeqCst);
    let mut args = server.args();
    args.extend(["--embed-queue-batches", "1", "--batch-size", "4"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&args);
    let pair = Pair::new();
    let conversations = record_history(&env, &pair).await;
    wait_until(WAIT, "every conversation extracted", || async {
        env.count("SELECT count(*) FROM conversations WHERE state = 'complete'").await >= conversations
    })
    .await;
    // Eight batches or more of four, and each embedding call takes 3 s. Had extraction
    // waited for the embedder, seven batches (28 conversations) would be embedded by now;
    // it did not: one call in flight, one batch queued, the rest left for the backfill.
    let embedded_by_extract = env.count("SELECT count(*) FROM conversation_embeddings").await;
    assert!(embedded_by_extract <= 12, "{embedded_by_extract} of {conversations} embedded while extracting");
    extract.stop().await;

    server.behaviour.delay_ms.store(0, Ordering::SeqCst);
    let mut backfill: Vec<String> = vec!["recall".into(), "backfill".into()];
    backfill.extend(server.args());
    let backfill: Vec<&str> = backfill.iter().map(String::as_str).collect();
    npcmem(&env, &backfill).await.assert_ok();
    assert_eq!(env.count("SELECT count(*) FROM conversation_embeddings").await, conversations);
    ingest.stop().await;
    env.cleanup().await;
}
