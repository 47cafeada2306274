//! Decoding and validation of inbound bytes, with the machine-readable reason codes that
//! dead letters carry in `Npcmem-Dlq-Reason` (DESIGN §3).
//!
//! Every failure here is permanent: the input is wrong, retrying cannot help, so the
//! consumer dead-letters it and acks. Nothing in this module panics on any input.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::memory::UnknownVariant;
use crate::wire::{ConversationEnded, NpcInfo, PlayerInfo, SCHEMA_VERSION, Speaker, TranscriptMessage};

/// Why an inbound message was refused. The strings are part of the wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonCode {
    InvalidJson,
    InvalidUtf8,
    SchemaVersion,
    MissingField,
    InvalidField,
    InvalidUuid,
    TooManyMessages,
    TextTooLong,
    PayloadTooLarge,
    /// Not produced by validation: a consumer gave up after `max_deliver` attempts.
    MaxDeliveries,
}

impl ReasonCode {
    pub const ALL: [ReasonCode; 10] = [
        ReasonCode::InvalidJson,
        ReasonCode::InvalidUtf8,
        ReasonCode::SchemaVersion,
        ReasonCode::MissingField,
        ReasonCode::InvalidField,
        ReasonCode::InvalidUuid,
        ReasonCode::TooManyMessages,
        ReasonCode::TextTooLong,
        ReasonCode::PayloadTooLarge,
        ReasonCode::MaxDeliveries,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            ReasonCode::InvalidJson => "invalid_json",
            ReasonCode::InvalidUtf8 => "invalid_utf8",
            ReasonCode::SchemaVersion => "schema_version",
            ReasonCode::MissingField => "missing_field",
            ReasonCode::InvalidField => "invalid_field",
            ReasonCode::InvalidUuid => "invalid_uuid",
            ReasonCode::TooManyMessages => "too_many_messages",
            ReasonCode::TextTooLong => "text_too_long",
            ReasonCode::PayloadTooLarge => "payload_too_large",
            ReasonCode::MaxDeliveries => "max_deliveries",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for ReasonCode {
    type Err = UnknownVariant;

    /// Parses a code back, e.g. from a dead letter's `Npcmem-Dlq-Reason` header.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ReasonCode::ALL
            .into_iter()
            .find(|code| code.as_str() == text)
            .ok_or_else(|| UnknownVariant { kind: "reason code", value: text.to_owned() })
    }
}

/// A refused inbound message. `message` is for humans and says which field or index
/// broke which limit; it is a single line of at most [`MAX_ERROR_MESSAGE_CHARS`]
/// chars without control characters, so it can travel in a NATS header as is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ValidationError {
    pub code: ReasonCode,
    pub message: String,
    /// The offending field as a path, e.g. `npc.name` or `messages[2].text`.
    pub field: Option<String>,
}

/// Error messages quote parts of the input; this bound keeps dead-letter headers small.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 300;

impl ValidationError {
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        ValidationError { code, message: header_safe(message.into()), field: None }
    }

    pub fn at_field(code: ReasonCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError { code, message: header_safe(message.into()), field: Some(field.into()) }
    }
}

/// Replaces control characters (a header value cannot hold CR or LF) and bounds length.
fn header_safe(message: String) -> String {
    let needs_cleaning = message.chars().any(char::is_control) || message.len() > MAX_ERROR_MESSAGE_CHARS;
    if !needs_cleaning {
        return message;
    }
    let mut cleaned: String = message
        .chars()
        .map(|character| if character.is_control() { ' ' } else { character })
        .take(MAX_ERROR_MESSAGE_CHARS)
        .collect();
    if message.chars().count() > MAX_ERROR_MESSAGE_CHARS {
        cleaned.pop();
        cleaned.push('…');
    }
    cleaned
}

/// Limits on `conversation.ended` (DESIGN §3), all configurable by the ingest service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationLimits {
    pub max_messages: usize,
    /// Per message text, counted in chars (Unicode scalar values), not bytes.
    pub max_text_chars: usize,
    pub max_payload_bytes: usize,
    /// NPC name, NPC role and player name, in chars.
    pub max_name_chars: usize,
}

impl Default for ConversationLimits {
    fn default() -> Self {
        ConversationLimits {
            max_messages: 200,
            max_text_chars: 4000,
            max_payload_bytes: 64 * 1024,
            max_name_chars: 100,
        }
    }
}

/// Locations are room names of the game, like the room ids of world messages.
pub const MAX_LOCATION_CHARS: usize = 200;
pub const MAX_FACTION_CHARS: usize = 100;
pub const MAX_FACTIONS: usize = 32;

/// Decodes and validates a `conversation.ended` payload.
///
/// Checks run in this order, and the first failure is returned: size
/// (`payload_too_large`), UTF-8 (`invalid_utf8`), JSON object (`invalid_json`),
/// `schema_version` (absent or `null` means 1), then the fields. Field rules: required
/// fields absent or `null` → `missing_field`; ids not a UUID string or the nil UUID →
/// `invalid_uuid`; more than `max_messages` messages → `too_many_messages`; a text over
/// `max_text_chars` → `text_too_long`; anything else wrong (types, blank names, names
/// over `max_name_chars`, a location over [`MAX_LOCATION_CHARS`], more than
/// [`MAX_FACTIONS`] factions or one over [`MAX_FACTION_CHARS`], an unknown speaker,
/// a timestamp that is not RFC 3339, `ended_at` before `started_at`, an empty message
/// list, a NUL character in any string, which PostgreSQL cannot store) →
/// `invalid_field`. Unknown fields are ignored.
///
/// Text is returned as received: names keep their spacing and nothing is redacted
/// yet (see [`crate::redact`]).
pub fn decode_conversation_ended(
    bytes: &[u8],
    limits: &ConversationLimits,
) -> Result<ConversationEnded, ValidationError> {
    let object = decode_object(bytes, limits.max_payload_bytes)?;
    check_schema_version(&object)?;
    let root = ObjectView::root(&object);

    let conversation_id = root.required_uuid("conversation_id")?;
    let npc_id = root.required_uuid("npc_id")?;
    let player_id = root.required_uuid("player_id")?;

    let npc_view = root.required_object("npc")?;
    let npc = NpcInfo {
        name: npc_view.required_name("name", limits.max_name_chars)?,
        role: npc_view.optional_string("role", limits.max_name_chars)?,
        factions: npc_view.factions("factions")?,
    };

    let player_view = root.required_object("player")?;
    let player = PlayerInfo {
        name: player_view.required_name("name", limits.max_name_chars)?,
        factions: player_view.factions("factions")?,
    };

    let location = root.optional_string("location", MAX_LOCATION_CHARS)?;

    let started_at = root.required_timestamp("started_at")?;
    let ended_at = root.required_timestamp("ended_at")?;
    if ended_at < started_at {
        return Err(ValidationError::at_field(
            ReasonCode::InvalidField,
            "ended_at",
            format!("ended_at {} is before started_at {}", ended_at.to_rfc3339(), started_at.to_rfc3339()),
        ));
    }

    let messages = decode_transcript(&root, limits)?;

    Ok(ConversationEnded {
        schema_version: SCHEMA_VERSION,
        conversation_id,
        npc_id,
        player_id,
        npc,
        player,
        location,
        started_at,
        ended_at,
        messages,
    })
}

fn decode_transcript(
    root: &ObjectView<'_>,
    limits: &ConversationLimits,
) -> Result<Vec<TranscriptMessage>, ValidationError> {
    let entries = root.required_array("messages")?;
    if entries.len() > limits.max_messages {
        return Err(ValidationError::at_field(
            ReasonCode::TooManyMessages,
            "messages",
            format!("messages has {} entries, limit {}", entries.len(), limits.max_messages),
        ));
    }
    if entries.is_empty() {
        return Err(ValidationError::at_field(
            ReasonCode::InvalidField,
            "messages",
            "messages is empty, a conversation has at least one message",
        ));
    }

    let mut messages = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let entry_path = format!("messages[{index}]");
        let Value::Object(entry_object) = entry else {
            return Err(wrong_type(&entry_path, "an object", entry));
        };
        let message_view = ObjectView { object: entry_object, path: entry_path };

        let speaker_value = message_view.required_string("speaker", usize::MAX)?;
        let speaker = match speaker_value {
            "player" => Speaker::Player,
            "npc" => Speaker::Npc,
            unknown => {
                let field = message_view.field_path("speaker");
                return Err(ValidationError::at_field(
                    ReasonCode::InvalidField,
                    field.clone(),
                    format!("{field} must be \"player\" or \"npc\", got {:?}", quoted_prefix(unknown)),
                ));
            }
        };

        let text = message_view.required_string_with_code("text", limits.max_text_chars, ReasonCode::TextTooLong)?;
        messages.push(TranscriptMessage { speaker, text: text.to_owned() });
    }
    Ok(messages)
}

/// Decodes any other inbound message (e.g. `PlayerPrivacy`, `ExtractJob`, world
/// messages) with the same envelope checks as [`decode_conversation_ended`] — size,
/// UTF-8, JSON object, `schema_version`, no NUL in any string value — then serde into
/// `T`. Serde errors map to `missing_field` (a required field absent or `null`),
/// `invalid_uuid` (a UUID that does not parse) or `invalid_field` (anything else).
/// Serde does not report paths: `field` is set only for a missing field, to its bare
/// name. A `null` `schema_version` is treated as absent (version 1).
pub fn decode_message<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    max_payload_bytes: usize,
) -> Result<T, ValidationError> {
    let mut object = decode_object(bytes, max_payload_bytes)?;
    check_schema_version(&object)?;
    if object.get("schema_version").is_some_and(Value::is_null) {
        object.remove("schema_version");
    }
    let root = Value::Object(object);
    // JSON can only carry U+0000 as the escape `\u0000`; skip the walk without one.
    let may_contain_nul = bytes.windows(NUL_ESCAPE.len()).any(|window| window == NUL_ESCAPE);
    if may_contain_nul && let Some(path) = first_string_with_nul(&root, &mut String::new()) {
        return Err(ValidationError::at_field(
            ReasonCode::InvalidField,
            path.clone(),
            format!("{path} contains a NUL character"),
        ));
    }
    serde_json::from_value(root).map_err(classify_serde_error)
}

const NUL_ESCAPE: &[u8] = b"\\u0000";

fn classify_serde_error(error: serde_json::Error) -> ValidationError {
    let description = error.to_string();
    if let Some(rest) = description.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default().to_owned();
        return ValidationError::at_field(
            ReasonCode::MissingField,
            field.clone(),
            format!("required field {field} is missing"),
        );
    }
    if description.starts_with("invalid type: null") {
        return ValidationError::new(ReasonCode::MissingField, format!("a required field is null: {description}"));
    }
    // uuid's serde impl says "UUID parsing failed: …" or "expected a formatted UUID
    // string"; nothing else in our types mentions UUIDs.
    if description.contains("UUID") {
        return ValidationError::new(ReasonCode::InvalidUuid, description);
    }
    ValidationError::new(ReasonCode::InvalidField, description)
}

/// Size, UTF-8 and JSON-object checks shared by every decoder.
fn decode_object(bytes: &[u8], max_payload_bytes: usize) -> Result<Map<String, Value>, ValidationError> {
    if bytes.len() > max_payload_bytes {
        return Err(ValidationError::new(
            ReasonCode::PayloadTooLarge,
            format!("payload has {} bytes, limit {max_payload_bytes}", bytes.len()),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|error| {
        ValidationError::new(
            ReasonCode::InvalidUtf8,
            format!("payload is not valid UTF-8: invalid byte at offset {}", error.valid_up_to()),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|error| {
        ValidationError::new(ReasonCode::InvalidJson, format!("payload is not valid JSON: {error}"))
    })?;
    match value {
        Value::Object(object) => Ok(object),
        other => Err(ValidationError::new(
            ReasonCode::InvalidJson,
            format!("payload is a JSON {}, expected an object", json_type_name(&other)),
        )),
    }
}

fn check_schema_version(object: &Map<String, Value>) -> Result<(), ValidationError> {
    let version = match object.get("schema_version") {
        None | Some(Value::Null) => return Ok(()),
        Some(version) => version,
    };
    if version.as_u64() == Some(u64::from(SCHEMA_VERSION)) {
        return Ok(());
    }
    let message = match version {
        Value::Number(number) => {
            format!("schema_version {number} is not supported, expected {SCHEMA_VERSION}")
        }
        other => format!("schema_version must be the integer {SCHEMA_VERSION}, got a {}", json_type_name(other)),
    };
    Err(ValidationError::at_field(ReasonCode::SchemaVersion, "schema_version", message))
}

/// Depth-first search for a string value containing U+0000; returns its path.
fn first_string_with_nul(value: &Value, path: &mut String) -> Option<String> {
    match value {
        Value::String(text) if text.contains('\0') => Some(path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            let parent_len = path.len();
            // Writing into a String cannot fail.
            let _ = write!(path, "[{index}]");
            let found = first_string_with_nul(item, path);
            path.truncate(parent_len);
            found
        }),
        Value::Object(object) => object.iter().find_map(|(key, item)| {
            let parent_len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            let found = first_string_with_nul(item, path);
            path.truncate(parent_len);
            found
        }),
        _ => None,
    }
}

/// One JSON object of the payload and its path, for precise error fields.
struct ObjectView<'v> {
    object: &'v Map<String, Value>,
    /// Empty for the payload root, otherwise e.g. `npc` or `messages[2]`.
    path: String,
}

impl<'v> ObjectView<'v> {
    fn root(object: &'v Map<String, Value>) -> Self {
        ObjectView { object, path: String::new() }
    }

    fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_owned() } else { format!("{}.{key}", self.path) }
    }

    /// The value under `key`; `null` counts as absent.
    fn optional(&self, key: &str) -> Option<&'v Value> {
        self.object.get(key).filter(|value| !value.is_null())
    }

    fn required(&self, key: &str) -> Result<&'v Value, ValidationError> {
        self.optional(key).ok_or_else(|| {
            let field = self.field_path(key);
            ValidationError::at_field(
                ReasonCode::MissingField,
                field.clone(),
                format!("required field {field} is missing"),
            )
        })
    }

    fn required_object(&self, key: &str) -> Result<ObjectView<'v>, ValidationError> {
        match self.required(key)? {
            Value::Object(object) => Ok(ObjectView { object, path: self.field_path(key) }),
            other => Err(wrong_type(&self.field_path(key), "an object", other)),
        }
    }

    fn required_array(&self, key: &str) -> Result<&'v Vec<Value>, ValidationError> {
        match self.required(key)? {
            Value::Array(items) => Ok(items),
            other => Err(wrong_type(&self.field_path(key), "an array", other)),
        }
    }

    fn required_uuid(&self, key: &str) -> Result<Uuid, ValidationError> {
        let field = self.field_path(key);
        let Value::String(text) = self.required(key)? else {
            return Err(ValidationError::at_field(
                ReasonCode::InvalidUuid,
                field.clone(),
                format!("{field} must be a UUID string"),
            ));
        };
        let id = Uuid::parse_str(text).map_err(|error| {
            ValidationError::at_field(
                ReasonCode::InvalidUuid,
                field.clone(),
                format!("{field} is not a valid UUID: {error}"),
            )
        })?;
        if id.is_nil() {
            return Err(ValidationError::at_field(
                ReasonCode::InvalidUuid,
                field.clone(),
                format!("{field} is the nil UUID"),
            ));
        }
        Ok(id)
    }

    fn required_timestamp(&self, key: &str) -> Result<DateTime<Utc>, ValidationError> {
        let text = self.required_string(key, usize::MAX)?;
        DateTime::parse_from_rfc3339(text).map(|timestamp| timestamp.with_timezone(&Utc)).map_err(|error| {
            let field = self.field_path(key);
            ValidationError::at_field(
                ReasonCode::InvalidField,
                field.clone(),
                format!("{field} is not an RFC 3339 timestamp: {error}"),
            )
        })
    }

    fn required_string(&self, key: &str, max_chars: usize) -> Result<&'v str, ValidationError> {
        self.required_string_with_code(key, max_chars, ReasonCode::InvalidField)
    }

    fn required_string_with_code(
        &self,
        key: &str,
        max_chars: usize,
        too_long_code: ReasonCode,
    ) -> Result<&'v str, ValidationError> {
        let field = self.field_path(key);
        match self.required(key)? {
            Value::String(text) => check_string(&field, text, max_chars, too_long_code),
            other => Err(wrong_type(&field, "a string", other)),
        }
    }

    /// A character or player name: a string with something other than whitespace.
    fn required_name(&self, key: &str, max_chars: usize) -> Result<String, ValidationError> {
        let name = self.required_string(key, max_chars)?;
        if name.trim().is_empty() {
            let field = self.field_path(key);
            return Err(ValidationError::at_field(
                ReasonCode::InvalidField,
                field.clone(),
                format!("{field} is empty"),
            ));
        }
        Ok(name.to_owned())
    }

    fn optional_string(&self, key: &str, max_chars: usize) -> Result<Option<String>, ValidationError> {
        let field = self.field_path(key);
        match self.optional(key) {
            None => Ok(None),
            Some(Value::String(text)) => {
                check_string(&field, text, max_chars, ReasonCode::InvalidField).map(|text| Some(text.to_owned()))
            }
            Some(other) => Err(wrong_type(&field, "a string", other)),
        }
    }

    /// Optional list of faction names; absent or `null` is the empty list.
    fn factions(&self, key: &str) -> Result<Vec<String>, ValidationError> {
        let field = self.field_path(key);
        let entries = match self.optional(key) {
            None => return Ok(Vec::new()),
            Some(Value::Array(entries)) => entries,
            Some(other) => return Err(wrong_type(&field, "an array of strings", other)),
        };
        if entries.len() > MAX_FACTIONS {
            return Err(ValidationError::at_field(
                ReasonCode::InvalidField,
                field.clone(),
                format!("{field} has {} entries, limit {MAX_FACTIONS}", entries.len()),
            ));
        }
        let mut factions = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let entry_field = format!("{field}[{index}]");
            let Value::String(faction) = entry else {
                return Err(wrong_type(&entry_field, "a string", entry));
            };
            check_string(&entry_field, faction, MAX_FACTION_CHARS, ReasonCode::InvalidField)?;
            if faction.trim().is_empty() {
                return Err(ValidationError::at_field(
                    ReasonCode::InvalidField,
                    entry_field.clone(),
                    format!("{entry_field} is empty"),
                ));
            }
            factions.push(faction.clone());
        }
        Ok(factions)
    }
}

fn check_string<'t>(
    field: &str,
    text: &'t str,
    max_chars: usize,
    too_long_code: ReasonCode,
) -> Result<&'t str, ValidationError> {
    // A char is at least one byte, so short byte strings need no char count.
    if text.len() > max_chars {
        let char_count = text.chars().count();
        if char_count > max_chars {
            return Err(ValidationError::at_field(
                too_long_code,
                field,
                format!("{field} has {char_count} chars, limit {max_chars}"),
            ));
        }
    }
    if text.contains('\0') {
        return Err(ValidationError::at_field(
            ReasonCode::InvalidField,
            field,
            format!("{field} contains a NUL character"),
        ));
    }
    Ok(text)
}

fn wrong_type(field: &str, expected: &str, actual: &Value) -> ValidationError {
    ValidationError::at_field(
        ReasonCode::InvalidField,
        field,
        format!("{field} must be {expected}, got a {}", json_type_name(actual)),
    )
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The first few chars of an input string, for quoting in an error message.
fn quoted_prefix(text: &str) -> String {
    const QUOTED_CHARS: usize = 40;
    text.chars().take(QUOTED_CHARS).collect()
}

#[cfg(test)]
mod tests {
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
                "max_deliveries"
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

        let null_version: ExtractJob = decode_message(
            br#"{"schema_version":null,"conversation_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10"}"#,
            limit,
        )
        .expect("null schema_version means 1");
        assert_eq!(null_version.schema_version, 1);

        let cases: [(&[u8], ReasonCode, Option<&str>); 9] = [
            (br#"{}"#, ReasonCode::MissingField, Some("conversation_id")),
            (br#"{"conversation_id":null}"#, ReasonCode::MissingField, None),
            (br#"{"conversation_id":"nope"}"#, ReasonCode::InvalidUuid, None),
            (br#"{"conversation_id":17}"#, ReasonCode::InvalidUuid, None),
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
            ConversationLimits {
                max_messages: 12,
                max_text_chars: 60,
                max_payload_bytes: 64 * 1024,
                max_name_chars: 100,
            }
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
}
