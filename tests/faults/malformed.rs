//! Over 10,000 generated malformed inputs across every inbound subject, built from a
//! valid message of each (truncations, wrong types, missing ids, bad UTF-8, nesting past
//! the parser's depth limit, oversized fields, junk): every one is dead-lettered at its
//! first delivery with a reason code by every consumer that reads it, every malformed
//! enrich request gets an error reply, and the services still apply a valid message
//! afterwards and stop cleanly (a crashed service fails its `stop`).

use std::collections::BTreeMap;
use std::time::Duration;

use npcmem_bus::topology::StreamKind;
use npcmem_core::validate::ReasonCode;
use npcmem_tests::fixtures::{self, EventMemory, Pair};
use npcmem_tests::{TestEnv, wait_until};
use serde_json::{Value, json};
use uuid::Uuid;

/// Whether `reason` is one a validation failure may carry: any reason code but the ones
/// of failures after decoding (`max_deliveries`: bad input must never be retried until
/// it runs out).
fn validation_reason(reason: &str) -> bool {
    ReasonCode::ALL.iter().map(|code| code.as_str()).any(|code| code == reason)
        && !matches!(reason, "max_deliveries" | "refused")
}

/// A deterministic generator, so a failing case can be regenerated.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

/// An inbound subject, a valid message on it, the fields that must hold an id, and the
/// consumers that decode it (each dead-letters it on its own).
struct Inbound {
    suffix: &'static str,
    valid: Value,
    id_fields: &'static [&'static str],
    consumers: &'static [&'static str],
}

fn inbound() -> Vec<Inbound> {
    let pair = Pair::new();
    let now = chrono::Utc::now().to_rfc3339();
    let memory = EventMemory { tags: &["trade"], importance: 0.5, valence: "neutral", intensity: 0.2 };
    vec![
        Inbound {
            suffix: "conversation.ended",
            valid: fixtures::trade_conversation(Uuid::new_v4(), &pair),
            id_fields: &["conversation_id", "npc_id", "player_id"],
            consumers: &["ingest"],
        },
        Inbound {
            suffix: "world.player_privacy",
            valid: json!({"schema_version": 1, "player_id": pair.player_id, "allow_memory": false, "at": now}),
            id_fields: &["player_id"],
            consumers: &["ingest-privacy"],
        },
        Inbound {
            suffix: "job.extract",
            valid: json!({"schema_version": 1, "conversation_id": Uuid::new_v4()}),
            id_fields: &["conversation_id"],
            consumers: &["extract"],
        },
        Inbound {
            suffix: "job.consolidate",
            valid: json!({"schema_version": 1, "npc_id": pair.npc_id, "player_id": pair.player_id}),
            id_fields: &["npc_id", "player_id"],
            consumers: &["consolidate"],
        },
        Inbound {
            suffix: "event.memory.stored",
            valid: fixtures::memory_stored(Uuid::new_v4(), &pair, &[memory], chrono::Utc::now(), &[], &[]),
            id_fields: &["conversation_id", "npc_id", "player_id"],
            consumers: &["relate", "gossip-learn"],
        },
        Inbound {
            suffix: "world.npc_moved",
            valid: json!({"schema_version": 1, "npc_id": pair.npc_id, "room_id": "tavern-1", "at": now}),
            id_fields: &["npc_id"],
            consumers: &["gossip-world"],
        },
        Inbound {
            suffix: "world.npc_profile",
            valid: json!({"schema_version": 1, "npc_id": pair.npc_id, "name": "Tobin", "role": "stable boy",
                          "factions": [], "drives": {"social": 0.8, "safety": 0.3, "loyalty": 0.5, "curiosity": 0.6}}),
            id_fields: &["npc_id"],
            consumers: &["gossip-world"],
        },
        Inbound {
            suffix: "world.observation",
            valid: json!({"schema_version": 1, "observation_id": Uuid::new_v4(), "witness_ids": [pair.npc_id],
                          "category": "world_event", "content": "Bandits raided the mill", "tags": ["bandits"],
                          "importance": 0.8, "at": now}),
            id_fields: &["observation_id"],
            consumers: &["gossip-world"],
        },
        Inbound {
            suffix: "world.fact",
            valid: json!({"schema_version": 1, "fact_id": Uuid::new_v4(), "npc_ids": [pair.npc_id],
                          "category": "location_info", "content": "The cave has treasure", "tags": ["cave"],
                          "importance": 0.6, "confidence": 1.0}),
            id_fields: &["fact_id"],
            consumers: &["gossip-world"],
        },
    ]
}

/// Cases per subject of each kind; 9 subjects × 1,160 = 10,440 stream messages.
const TRUNCATIONS: usize = 450;
const BAD_UTF8: usize = 200;
const WRONG_TYPES: usize = 200;
const MISSING_IDS: usize = 30;
const TOO_DEEP: usize = 100;
const JUNK: usize = 175;
const OVERSIZED: usize = 5;
const CASES_PER_SUBJECT: usize = TRUNCATIONS + BAD_UTF8 + WRONG_TYPES + MISSING_IDS + TOO_DEEP + JUNK + OVERSIZED;

/// Malformed versions of `valid`: none of them can decode as the subject's message.
fn malformed(valid: &Value, id_fields: &[&str], rng: &mut XorShift) -> Vec<Vec<u8>> {
    let bytes = fixtures::bytes(valid);
    let mut cases = Vec::with_capacity(CASES_PER_SUBJECT);
    // A proper prefix of a JSON object never parses (its closing brace is missing).
    for _ in 0..TRUNCATIONS {
        cases.push(bytes[..1 + rng.below(bytes.len() - 1)].to_vec());
    }
    // An invalid UTF-8 sequence right after the opening quote of a string; compact JSON of
    // these documents has no escaped quotes, so every other quote opens a string.
    let openers: Vec<usize> =
        bytes.iter().enumerate().filter(|(_, b)| **b == b'"').map(|(i, _)| i).step_by(2).collect();
    const BAD_SEQUENCES: &[&[u8]] =
        &[b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82", b"\x80"];
    for _ in 0..BAD_UTF8 {
        let at = openers[rng.below(openers.len())] + 1;
        let mut case = bytes[..at].to_vec();
        case.extend_from_slice(BAD_SEQUENCES[rng.below(BAD_SEQUENCES.len())]);
        case.extend_from_slice(&bytes[at..]);
        cases.push(case);
    }
    let wrong_values = [
        json!(42),
        json!(-1.5),
        json!(true),
        json!(null),
        json!([]),
        json!({"id": "x"}),
        json!("not-a-uuid"),
        json!(""),
        json!("0b7e4a52-6f0e-4c7a-9d41"),
    ];
    for _ in 0..WRONG_TYPES {
        let mut case = valid.clone();
        case[id_fields[rng.below(id_fields.len())]] = wrong_values[rng.below(wrong_values.len())].clone();
        cases.push(fixtures::bytes(&case));
    }
    for index in 0..MISSING_IDS {
        let mut case = valid.clone();
        case.as_object_mut().expect("an object").remove(id_fields[index % id_fields.len()]);
        cases.push(fixtures::bytes(&case));
    }
    // Past serde_json's recursion limit (128), in a field of its own at the front.
    for _ in 0..TOO_DEEP {
        let depth = 129 + rng.below(4_000);
        let mut case = format!("{{\"deep\":{}{},", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        case.extend_from_slice(&bytes[1..]);
        cases.push(case);
    }
    let junk: [&[u8]; 10] =
        [b"", b" ", b"null", b"[]", b"\"text\"", b"42", b"true", b"{", b"}{", b"{\"schema_version\":}"];
    for index in 0..JUNK {
        if index < junk.len() * 5 {
            cases.push(junk[index % junk.len()].to_vec());
        } else {
            // Random high bytes: never valid UTF-8 text, let alone JSON.
            cases.push((0..1 + rng.below(200)).map(|_| 0x80 | (rng.next() as u8)).collect());
        }
    }
    // Bigger than every consumer's message limit (at most 256 KiB) but under the stream's.
    for _ in 0..OVERSIZED {
        let mut case = valid.clone();
        case["padding"] = json!("x".repeat(300 * 1024));
        cases.push(fixtures::bytes(&case));
    }
    assert_eq!(cases.len(), CASES_PER_SUBJECT);
    cases
}

async fn dlq_count(env: &TestEnv) -> u64 {
    let mut stream = env.js.get_stream(env.topology.stream_name(StreamKind::Dlq)).await.expect("the DLQ exists");
    stream.info().await.expect("DLQ info").state.messages
}

#[tokio::test]
async fn ten_thousand_malformed_inputs_are_each_dead_lettered_with_a_reason_and_nothing_crashes() {
    let env = TestEnv::new().await;
    let services = [
        env.spawn_ingest(&[]),
        env.spawn_extract(&[]),
        env.spawn_relate(&[]),
        env.spawn_consolidate(&[]),
        env.spawn_gossip(&[]),
        env.spawn_enrich(&[]),
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut published = 0usize;
    for subject in inbound() {
        let full_subject = env.subject(subject.suffix);
        for payload in malformed(&subject.valid, subject.id_fields, &mut rng) {
            env.publish(&full_subject, payload, None).await;
            published += 1;
        }
        for consumer in subject.consumers {
            *expected.entry((consumer.to_string(), full_subject.clone())).or_default() += CASES_PER_SUBJECT as u64;
        }
    }
    let letters_expected: u64 = expected.values().sum();
    wait_until(Duration::from_secs(240), "every malformed input dead-lettered", || async {
        dlq_count(&env).await >= letters_expected
    })
    .await;

    // Malformed enrich requests: answered with an error object, never left unanswered.
    let valid_request = json!({"npc_id": Uuid::new_v4(), "player_id": Uuid::new_v4(), "max_tokens": 500,
                               "npc": {"name": "Brom", "role": "the blacksmith"}});
    let enrich_cases = malformed(&valid_request, &["npc_id", "player_id"], &mut rng);
    let mut enrich_errors = 0usize;
    for payload in enrich_cases.iter().filter(|payload| payload.len() <= 64 * 1024) {
        let reply = env.request_raw(&env.subject("enrich.request"), payload.clone()).await;
        let code = reply["error"]["code"].as_str().unwrap_or_default();
        assert!(!code.is_empty(), "a malformed enrich request got an error reply: {reply}");
        enrich_errors += 1;
    }

    // Still alive: a valid conversation goes all the way to memories.
    let pair = Pair::new();
    env.publish_trade(&pair).await;
    wait_until(Duration::from_secs(60), "the valid conversation's memories after the flood", || async {
        env.count("SELECT count(*) FROM memories").await > 0
    })
    .await;

    let letters = env.stream_messages(StreamKind::Dlq).await;
    let header = |letter: &async_nats::jetstream::message::StreamMessage, name: &str| {
        letter.headers.get(name).map(|value| value.as_str().to_owned()).unwrap_or_default()
    };
    let mut counted: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let mut without_reason = 0u64;
    let mut redelivered = 0u64;
    for letter in &letters {
        let reason = header(letter, "Npcmem-Dlq-Reason");
        if !validation_reason(&reason) {
            without_reason += 1;
        }
        if header(letter, "Npcmem-Dlq-Deliveries") != "1" {
            redelivered += 1;
        }
        *reasons.entry(reason).or_default() += 1;
        *counted.entry((header(letter, "Npcmem-Dlq-Consumer"), header(letter, "Npcmem-Dlq-Subject"))).or_default() += 1;
    }
    let mut crashed = 0usize;
    for service in services {
        if service.task.is_finished() {
            crashed += 1;
        }
        service.stop().await;
    }
    println!(
        "malformed inputs: {published} on {} subjects, {} dead letters (expected {letters_expected}), \
         {without_reason} without a known reason, {redelivered} after more than one delivery; \
         {enrich_errors} malformed enrich requests, each answered with an error; {crashed} services crashed",
        inbound().len(),
        letters.len(),
    );
    println!("reasons: {reasons:?}");
    assert!(published >= 10_000, "at least 10,000 malformed inputs");
    assert_eq!(counted, expected, "each malformed input dead-lettered once by every consumer that reads it");
    assert_eq!(without_reason, 0, "every dead letter carries a known reason code");
    assert_eq!(redelivered, 0, "bad input is dead-lettered at its first delivery");
    assert_eq!(crashed, 0, "no service stopped on its own");
    env.cleanup().await;
}
