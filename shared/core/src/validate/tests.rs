//! Unit and property tests of the inbound decoders.
use super::*;
use crate::wire::{ExtractJob, PlayerPrivacy};
use serde_json::json;

fn valid_payload() -> Value {
    json!({
        "schema_version": 1,
        "conversation_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
        "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
        "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
        "npc": {"name": "Brom", "role": "blacksmith", "factions": ["smiths_guild"]},
        "player": {"name": "Aria", "factions": ["thieves_guild"]},
        "location": "Market Square",
        "started_at": "2025-06-01T12:00:00Z",
        "ended_at": "2025-06-01T14:05:00+02:00",
        "messages": [
            {"speaker": "player", "text": "I need a sword."},
            {"speaker": "npc", "text": "Forty gold, no haggling."}
        ]
    })
}

fn decode(payload: &Value) -> Result<ConversationEnded, ValidationError> {
    let bytes = serde_json::to_vec(payload).expect("serialises");
    decode_conversation_ended(&bytes, &ConversationLimits::default())
}

fn expect_error(payload: &Value, code: ReasonCode, field: Option<&str>) -> ValidationError {
    let error = decode(payload).expect_err("payload must be refused");
    assert_eq!(error.code, code, "{error}");
    assert_eq!(error.field.as_deref(), field, "{error}");
    error
}

fn with(mutate: impl FnOnce(&mut Value)) -> Value {
    let mut payload = valid_payload();
    mutate(&mut payload);
    payload
}

fn remove(payload: &mut Value, key: &str) {
    if let Some(object) = payload.as_object_mut() {
        object.remove(key);
    }
}

#[test]
fn reason_codes_have_their_wire_spelling() {
    let spellings: Vec<&str> = ReasonCode::ALL.iter().map(ReasonCode::as_str).collect();
    assert_eq!(
        spellings,
        [
            "invalid_json",
            "invalid_utf8",
            "schema_version",
            "missing_field",
            "invalid_field",
            "invalid_uuid",
            "too_many_messages",
            "text_too_long",
            "payload_too_large",
            "max_deliveries",
            "refused"
        ]
    );
    for code in ReasonCode::ALL {
        assert_eq!(code.to_string(), code.as_str());
        assert_eq!(code.as_str().parse::<ReasonCode>(), Ok(code));
    }
    assert!("nope".parse::<ReasonCode>().is_err());
}

#[test]
fn valid_conversation_decodes() {
    let conversation = decode(&valid_payload()).expect("valid payload");
    assert_eq!(conversation.npc.name, "Brom");
    assert_eq!(conversation.npc.factions, ["smiths_guild"]);
    assert_eq!(conversation.player.name, "Aria");
    assert_eq!(conversation.location.as_deref(), Some("Market Square"));
    assert_eq!(conversation.messages.len(), 2);
    assert_eq!(conversation.messages[1].speaker, Speaker::Npc);
    // +02:00 is normalised to UTC: 14:05+02:00 is 12:05Z.
    assert_eq!(conversation.ended_at.to_rfc3339(), "2025-06-01T12:05:00+00:00");

    let typed: ConversationEnded = serde_json::from_value(valid_payload()).expect("serde agrees");
    assert_eq!(conversation, typed);
}

#[test]
fn optional_fields_may_be_absent_or_null() {
    let payload = with(|payload| {
        remove(payload, "schema_version");
        remove(payload, "location");
        payload["npc"] = json!({"name": "Brom", "role": null, "factions": null});
        payload["player"] = json!({"name": "Aria"});
    });
    let conversation = decode(&payload).expect("optional fields are optional");
    assert_eq!(conversation.schema_version, 1);
    assert_eq!(conversation.location, None);
    assert_eq!(conversation.npc.role, None);
    assert!(conversation.npc.factions.is_empty());
    assert!(conversation.player.factions.is_empty());

    let null_version = with(|payload| payload["schema_version"] = Value::Null);
    assert!(decode(&null_version).is_ok());
}

#[test]
fn unknown_fields_are_ignored() {
    let payload = with(|payload| {
        payload["mood"] = json!("cheerful");
        payload["npc"]["hair"] = json!("red");
        payload["messages"][0]["emote"] = json!("waves");
    });
    assert!(decode(&payload).is_ok());
}

#[test]
fn envelope_failures_have_their_codes() {
    let limits = ConversationLimits::default();
    let too_large = vec![b' '; limits.max_payload_bytes + 1];
    let error = decode_conversation_ended(&too_large, &limits).expect_err("too large");
    assert_eq!(error.code, ReasonCode::PayloadTooLarge);
    assert_eq!(error.message, "payload has 65537 bytes, limit 65536");

    let error = decode_conversation_ended(b"{\"a\":\"\xff\"}", &limits).expect_err("not utf-8");
    assert_eq!(error.code, ReasonCode::InvalidUtf8);

    for not_json in [&b""[..], b"{", b"nope", b"{\"a\":1,}"] {
        let error = decode_conversation_ended(not_json, &limits).expect_err("not json");
        assert_eq!(error.code, ReasonCode::InvalidJson, "{error}");
    }
    for not_object in [&b"[]"[..], b"1", b"null", b"\"text\""] {
        let error = decode_conversation_ended(not_object, &limits).expect_err("not object");
        assert_eq!(error.code, ReasonCode::InvalidJson, "{error}");
    }
}

#[test]
fn size_is_checked_before_anything_else() {
    let limits = ConversationLimits { max_payload_bytes: 4, ..ConversationLimits::default() };
    let error = decode_conversation_ended(b"\xff\xff\xff\xff\xff", &limits).expect_err("large");
    assert_eq!(error.code, ReasonCode::PayloadTooLarge);
}

#[test]
fn unsupported_schema_versions_are_refused() {
    for version in [json!(2), json!(0), json!(-1), json!(1.5), json!("1"), json!(true)] {
        let payload = with(|payload| payload["schema_version"] = version.clone());
        expect_error(&payload, ReasonCode::SchemaVersion, Some("schema_version"));
    }
    // The version is checked before the fields: a v2 message may have other fields.
    let v2 = json!({"schema_version": 2, "conversation": {}});
    expect_error(&v2, ReasonCode::SchemaVersion, Some("schema_version"));
}

#[test]
fn missing_or_null_required_fields_are_named() {
    for key in ["conversation_id", "npc_id", "player_id", "npc", "player", "started_at", "ended_at", "messages"] {
        let absent = with(|payload| remove(payload, key));
        expect_error(&absent, ReasonCode::MissingField, Some(key));
        let null = with(|payload| payload[key] = Value::Null);
        expect_error(&null, ReasonCode::MissingField, Some(key));
    }
    let no_npc_name = with(|payload| remove(&mut payload["npc"], "name"));
    let error = expect_error(&no_npc_name, ReasonCode::MissingField, Some("npc.name"));
    assert_eq!(error.message, "required field npc.name is missing");
    let null_player_name = with(|payload| payload["player"]["name"] = Value::Null);
    expect_error(&null_player_name, ReasonCode::MissingField, Some("player.name"));
    let no_text = with(|payload| remove(&mut payload["messages"][1], "text"));
    expect_error(&no_text, ReasonCode::MissingField, Some("messages[1].text"));
    let no_speaker = with(|payload| payload["messages"][0]["speaker"] = Value::Null);
    expect_error(&no_speaker, ReasonCode::MissingField, Some("messages[0].speaker"));
}

#[test]
fn bad_ids_are_invalid_uuids() {
    for bad in [
        json!("not-a-uuid"),
        json!("0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b1"),
        json!("00000000-0000-0000-0000-000000000000"),
        json!(42),
        json!({"id": 1}),
    ] {
        for key in ["conversation_id", "npc_id", "player_id"] {
            let payload = with(|payload| payload[key] = bad.clone());
            expect_error(&payload, ReasonCode::InvalidUuid, Some(key));
        }
    }
    let simple_form = with(|payload| {
        payload["npc_id"] = json!("1c8f5b637a1f4d8b8e524a3b2d0f9c21");
    });
    assert!(decode(&simple_form).is_ok(), "uuid's other textual forms are accepted");
}

#[test]
fn bad_names_are_invalid_fields() {
    let empty = with(|payload| payload["npc"]["name"] = json!("   "));
    let error = expect_error(&empty, ReasonCode::InvalidField, Some("npc.name"));
    assert_eq!(error.message, "npc.name is empty");

    let long_name = "é".repeat(101);
    let too_long = with(|payload| payload["player"]["name"] = json!(long_name));
    let error = expect_error(&too_long, ReasonCode::InvalidField, Some("player.name"));
    assert_eq!(error.message, "player.name has 101 chars, limit 100");

    // 100 two-byte chars are 200 bytes but within the limit: chars, not bytes, count.
    let at_limit = with(|payload| payload["player"]["name"] = json!("é".repeat(100)));
    assert!(decode(&at_limit).is_ok());

    let number = with(|payload| payload["npc"]["name"] = json!(7));
    let error = expect_error(&number, ReasonCode::InvalidField, Some("npc.name"));
    assert_eq!(error.message, "npc.name must be a string, got a number");

    let long_role = with(|payload| payload["npc"]["role"] = json!("r".repeat(101)));
    expect_error(&long_role, ReasonCode::InvalidField, Some("npc.role"));

    let npc_not_object = with(|payload| payload["npc"] = json!("Brom"));
    expect_error(&npc_not_object, ReasonCode::InvalidField, Some("npc"));
}

#[test]
fn location_is_limited_to_two_hundred_chars() {
    let at_limit = with(|payload| payload["location"] = json!("x".repeat(200)));
    assert!(decode(&at_limit).is_ok());
    let too_long = with(|payload| payload["location"] = json!("x".repeat(201)));
    expect_error(&too_long, ReasonCode::InvalidField, Some("location"));
    let not_string = with(|payload| payload["location"] = json!(["a"]));
    expect_error(&not_string, ReasonCode::InvalidField, Some("location"));
}

#[test]
fn factions_are_bounded() {
    let many: Vec<String> = (0..33).map(|index| format!("guild_{index}")).collect();
    let too_many = with(|payload| payload["npc"]["factions"] = json!(many));
    expect_error(&too_many, ReasonCode::InvalidField, Some("npc.factions"));

    let thirty_two: Vec<String> = (0..32).map(|index| format!("guild_{index}")).collect();
    let at_limit = with(|payload| payload["npc"]["factions"] = json!(thirty_two));
    assert!(decode(&at_limit).is_ok());

    let long = with(|payload| payload["player"]["factions"] = json!(["ok", "f".repeat(101)]));
    expect_error(&long, ReasonCode::InvalidField, Some("player.factions[1]"));

    let not_string = with(|payload| payload["player"]["factions"] = json!([1]));
    expect_error(&not_string, ReasonCode::InvalidField, Some("player.factions[0]"));

    let empty = with(|payload| payload["player"]["factions"] = json!([""]));
    expect_error(&empty, ReasonCode::InvalidField, Some("player.factions[0]"));

    let not_array = with(|payload| payload["npc"]["factions"] = json!("smiths_guild"));
    expect_error(&not_array, ReasonCode::InvalidField, Some("npc.factions"));
}

#[test]
fn timestamps_must_be_rfc3339_and_ordered() {
    for bad in [json!("yesterday"), json!("2025-06-01 12:00:00"), json!(1_717_243_200)] {
        let payload = with(|payload| payload["started_at"] = bad.clone());
        expect_error(&payload, ReasonCode::InvalidField, Some("started_at"));
    }
    let reversed = with(|payload| payload["ended_at"] = json!("2025-06-01T11:59:59Z"));
    let error = expect_error(&reversed, ReasonCode::InvalidField, Some("ended_at"));
    assert!(error.message.contains("before started_at"), "{error}");

    let same_instant = with(|payload| payload["ended_at"] = json!("2025-06-01T12:00:00Z"));
    assert!(decode(&same_instant).is_ok());
}

#[test]
fn messages_are_checked_one_by_one() {
    let empty = with(|payload| payload["messages"] = json!([]));
    expect_error(&empty, ReasonCode::InvalidField, Some("messages"));

    let not_array = with(|payload| payload["messages"] = json!({"speaker": "npc"}));
    expect_error(&not_array, ReasonCode::InvalidField, Some("messages"));

    let not_object = with(|payload| payload["messages"][1] = json!("hello"));
    expect_error(&not_object, ReasonCode::InvalidField, Some("messages[1]"));

    let shouting = with(|payload| payload["messages"][0]["speaker"] = json!("Player"));
    let error = expect_error(&shouting, ReasonCode::InvalidField, Some("messages[0].speaker"));
    assert_eq!(error.message, "messages[0].speaker must be \"player\" or \"npc\", got \"Player\"");

    let number_text = with(|payload| payload["messages"][1]["text"] = json!(3));
    expect_error(&number_text, ReasonCode::InvalidField, Some("messages[1].text"));
}

#[test]
fn message_limits_have_their_own_codes() {
    let limits = ConversationLimits::default();
    let messages: Vec<Value> = (0..201).map(|_| json!({"speaker": "player", "text": "hi"})).collect();
    let too_many = with(|payload| payload["messages"] = json!(messages));
    let bytes = serde_json::to_vec(&too_many).expect("serialises");
    let error = decode_conversation_ended(&bytes, &limits).expect_err("too many");
    assert_eq!(error.code, ReasonCode::TooManyMessages);
    assert_eq!(error.message, "messages has 201 entries, limit 200");

    let long_text = with(|payload| {
        payload["messages"][1]["text"] = json!("ü".repeat(4001));
    });
    let error = expect_error(&long_text, ReasonCode::TextTooLong, Some("messages[1].text"));
    assert_eq!(error.message, "messages[1].text has 4001 chars, limit 4000");

    // 4000 chars of 2 bytes each are fine although they are 8000 bytes.
    let at_limit = with(|payload| payload["messages"][1]["text"] = json!("ü".repeat(4000)));
    assert!(decode(&at_limit).is_ok());
}

#[test]
fn nul_characters_are_refused() {
    let payload = with(|payload| payload["messages"][0]["text"] = json!("a\u{0}b"));
    expect_error(&payload, ReasonCode::InvalidField, Some("messages[0].text"));
    let payload = with(|payload| payload["npc"]["name"] = json!("Br\u{0}m"));
    expect_error(&payload, ReasonCode::InvalidField, Some("npc.name"));
}

#[test]
fn error_messages_are_header_safe() {
    let payload = with(|payload| {
        payload["messages"][0]["speaker"] = json!(format!("evil\r\nNpcmem-Dlq-Reason: x{}", "y".repeat(500)));
    });
    let error = decode(&payload).expect_err("unknown speaker");
    assert!(!error.message.chars().any(char::is_control), "{}", error.message);
    assert!(error.message.chars().count() <= MAX_ERROR_MESSAGE_CHARS);
    let long = ValidationError::new(ReasonCode::InvalidField, "z".repeat(1000));
    assert_eq!(long.message.chars().count(), MAX_ERROR_MESSAGE_CHARS);
    assert!(long.message.ends_with('…'));
}

#[test]
fn decode_message_maps_serde_errors_to_codes() {
    let limit = 65_536;
    let job: ExtractJob =
        decode_message(br#"{"conversation_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10"}"#, limit).expect("valid job");
    assert_eq!(job.schema_version, 1);

    let null_version: ExtractJob =
        decode_message(br#"{"schema_version":null,"conversation_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10"}"#, limit)
            .expect("null schema_version means 1");
    assert_eq!(null_version.schema_version, 1);

    let cases: [(&[u8], ReasonCode, Option<&str>); 9] = [
        (br#"{}"#, ReasonCode::MissingField, Some("conversation_id")),
        (br#"{"conversation_id":null}"#, ReasonCode::MissingField, Some("conversation_id")),
        (br#"{"conversation_id":"nope"}"#, ReasonCode::InvalidUuid, Some("conversation_id")),
        (br#"{"conversation_id":17}"#, ReasonCode::InvalidUuid, Some("conversation_id")),
        (br#"{"schema_version":3}"#, ReasonCode::SchemaVersion, Some("schema_version")),
        (b"[1]", ReasonCode::InvalidJson, None),
        (b"{", ReasonCode::InvalidJson, None),
        (b"\xc3\x28", ReasonCode::InvalidUtf8, None),
        (br#"{"conversation_id":"a\u0000"}"#, ReasonCode::InvalidField, Some("conversation_id")),
    ];
    for (bytes, code, field) in cases {
        let error = decode_message::<ExtractJob>(bytes, limit).expect_err("refused");
        assert_eq!(error.code, code, "{error}");
        assert_eq!(error.field.as_deref(), field, "{error}");
    }

    let nested_nul = br#"{"conversation_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10","x":[{"y":"\u0000"}]}"#;
    let error = decode_message::<ExtractJob>(nested_nul, limit).expect_err("nul");
    assert_eq!(error.code, ReasonCode::InvalidField);
    assert_eq!(error.field.as_deref(), Some("x[0].y"));

    let error = decode_message::<ExtractJob>(&[b' '; 20], 10).expect_err("too large");
    assert_eq!(error.code, ReasonCode::PayloadTooLarge);

    let wrong_type =
        br#"{"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","allow_memory":"no","at":"2025-06-01T12:00:00Z"}"#;
    let error = decode_message::<PlayerPrivacy>(wrong_type, limit).expect_err("bad bool");
    assert_eq!(error.code, ReasonCode::InvalidField);

    let bad_time = br#"{"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","allow_memory":false,"at":"soon"}"#;
    let error = decode_message::<PlayerPrivacy>(bad_time, limit).expect_err("bad time");
    assert_eq!(error.code, ReasonCode::InvalidField);

    let privacy: PlayerPrivacy = decode_message(
        br#"{"schema_version":1,"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","allow_memory":false,"at":"2025-06-01T12:00:00Z","extra":1}"#,
        limit,
    )
    .expect("valid privacy message");
    assert!(!privacy.allow_memory);
}

mod properties {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn small_limits() -> ConversationLimits {
        ConversationLimits { max_messages: 12, max_text_chars: 60, max_payload_bytes: 64 * 1024, max_name_chars: 100 }
    }

    fn arbitrary_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|number| json!(number)),
            any::<f64>().prop_map(|number| json!(number)),
            ".{0,12}".prop_map(Value::String),
            Just(json!("0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10")),
            Just(json!("2025-06-01T12:00:00Z")),
            Just(json!("player")),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("schema_version".to_owned()),
                        Just("conversation_id".to_owned()),
                        Just("npc".to_owned()),
                        Just("name".to_owned()),
                        Just("messages".to_owned()),
                        Just("speaker".to_owned()),
                        Just("text".to_owned()),
                        "[a-z_]{1,8}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn transcript_message() -> impl Strategy<Value = TranscriptMessage> {
        (any::<bool>(), "[^\u{0}]{0,60}").prop_map(|(from_player, text)| TranscriptMessage {
            speaker: if from_player { Speaker::Player } else { Speaker::Npc },
            text,
        })
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-zÀ-ÿ][A-Za-zÀ-ÿ' -]{0,30}"
    }

    fn nonzero_uuid() -> impl Strategy<Value = Uuid> {
        (1..=u128::MAX).prop_map(Uuid::from_u128)
    }

    prop_compose! {
        fn valid_conversation()(
            conversation_id in nonzero_uuid(),
            npc_id in nonzero_uuid(),
            player_id in nonzero_uuid(),
            npc_name in name(),
            npc_role in proptest::option::of(name()),
            npc_factions in prop::collection::vec("[a-z_]{1,20}", 0..4),
            player_name in name(),
            player_factions in prop::collection::vec("[a-z_]{1,20}", 0..4),
            location in proptest::option::of("[^\u{0}]{0,40}"),
            start_seconds in 0i64..4_000_000_000,
            start_nanos in 0u32..1_000_000_000,
            duration_millis in 0i64..86_400_000,
            messages in prop::collection::vec(transcript_message(), 1..=12),
        ) -> ConversationEnded {
            let started_at = Utc
                .timestamp_opt(start_seconds, start_nanos)
                .single()
                .expect("in range by construction");
            ConversationEnded {
                schema_version: SCHEMA_VERSION,
                conversation_id,
                npc_id,
                player_id,
                npc: NpcInfo { name: npc_name, role: npc_role, factions: npc_factions },
                player: PlayerInfo { name: player_name, factions: player_factions },
                location,
                started_at,
                ended_at: started_at + chrono::Duration::milliseconds(duration_millis),
                messages,
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let limits = small_limits();
            if let Err(error) = decode_conversation_ended(&bytes, &limits) {
                prop_assert!(ReasonCode::ALL.contains(&error.code));
            }
            let _ = decode_message::<PlayerPrivacy>(&bytes, 1024);
        }

        #[test]
        fn arbitrary_json_never_panics(value in arbitrary_json()) {
            let bytes = serde_json::to_vec(&value).expect("serialises");
            match decode_conversation_ended(&bytes, &small_limits()) {
                Ok(conversation) => prop_assert!(!conversation.messages.is_empty()),
                Err(error) => prop_assert_ne!(error.code, ReasonCode::MaxDeliveries),
            }
            let _ = decode_message::<ExtractJob>(&bytes, 1024);
        }

        #[test]
        fn valid_conversations_pass_and_round_trip(conversation in valid_conversation()) {
            let bytes = serde_json::to_vec(&conversation).expect("serialises");
            let decoded = decode_conversation_ended(&bytes, &small_limits());
            prop_assert_eq!(decoded.as_ref(), Ok(&conversation));
            let generic: ConversationEnded =
                decode_message(&bytes, 64 * 1024).expect("generic decoder agrees");
            prop_assert_eq!(generic, conversation);
        }

        #[test]
        fn one_message_too_many_is_too_many_messages(
            conversation in valid_conversation(),
            extra in 1usize..5,
        ) {
            let limits = small_limits();
            let mut crowded = conversation;
            let filler = TranscriptMessage { speaker: Speaker::Npc, text: "mm".into() };
            while crowded.messages.len() < limits.max_messages + extra {
                crowded.messages.push(filler.clone());
            }
            let bytes = serde_json::to_vec(&crowded).expect("serialises");
            let error = decode_conversation_ended(&bytes, &limits).expect_err("too many");
            prop_assert_eq!(error.code, ReasonCode::TooManyMessages);
            prop_assert_eq!(error.field.as_deref(), Some("messages"));
        }

        #[test]
        fn one_long_text_is_text_too_long(
            conversation in valid_conversation(),
            index_seed in any::<usize>(),
            excess in 1usize..10,
        ) {
            let limits = small_limits();
            let mut wordy = conversation;
            let index = index_seed % wordy.messages.len();
            wordy.messages[index].text = "ж".repeat(limits.max_text_chars + excess);
            let bytes = serde_json::to_vec(&wordy).expect("serialises");
            let error = decode_conversation_ended(&bytes, &limits).expect_err("too long");
            prop_assert_eq!(error.code, ReasonCode::TextTooLong);
            let expected_field = format!("messages[{index}].text");
            prop_assert_eq!(error.field.as_deref(), Some(expected_field.as_str()));
        }

        #[test]
        fn one_broken_id_is_invalid_uuid(
            conversation in valid_conversation(),
            which in 0usize..3,
            garbage in "[g-z]{1,36}",
        ) {
            let mut payload = serde_json::to_value(&conversation).expect("serialises");
            let key = ["conversation_id", "npc_id", "player_id"][which];
            payload[key] = json!(garbage);
            let bytes = serde_json::to_vec(&payload).expect("serialises");
            let error = decode_conversation_ended(&bytes, &small_limits()).expect_err("bad id");
            prop_assert_eq!(error.code, ReasonCode::InvalidUuid);
            prop_assert_eq!(error.field.as_deref(), Some(key));
        }
    }
}

#[test]
fn decode_errors_name_the_field_in_json_terms() {
    let limit = 65_536;
    let job = |bytes: &[u8]| decode_message::<ExtractJob>(bytes, limit).expect_err("refused");
    let privacy = |bytes: &[u8]| decode_message::<PlayerPrivacy>(bytes, limit).expect_err("refused");
    type Decoder<'a> = &'a dyn Fn(&[u8]) -> ValidationError;
    let cases: [(Decoder<'_>, &[u8], ReasonCode, &str, &str); 5] = [
        (
            &job,
            br#"{"conversation_id":"r1"}"#,
            ReasonCode::InvalidUuid,
            "conversation_id",
            "conversation_id is not a UUID",
        ),
        (
            &job,
            br#"{"conversation_id":17}"#,
            ReasonCode::InvalidUuid,
            "conversation_id",
            "must be a UUID string, got a number",
        ),
        (
            &privacy,
            br#"{"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","allow_memory":"no","at":"2025-06-01T12:00:00Z"}"#,
            ReasonCode::InvalidField,
            "allow_memory",
            "allow_memory: must be true or false, got a string",
        ),
        (
            &privacy,
            br#"{"player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","at":"2025-06-01T12:00:00Z"}"#,
            ReasonCode::MissingField,
            "allow_memory",
            "allow_memory is required",
        ),
        (
            &privacy,
            br#"{"player_id":[],"allow_memory":true,"at":"2025-06-01T12:00:00Z"}"#,
            ReasonCode::InvalidUuid,
            "player_id",
            "must be a UUID string, got an array",
        ),
    ];
    for (decode, bytes, code, field, wording) in cases {
        let error = decode(bytes);
        assert_eq!((error.code, error.field.as_deref()), (code, Some(field)), "{error}");
        assert!(error.message.contains(wording), "{:?} says {wording:?}", error.message);
        assert!(
            !error.message.contains("struct") && !error.message.contains("u32"),
            "no Rust types: {}",
            error.message
        );
    }
}
