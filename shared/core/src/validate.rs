//! Decoding and validation of inbound bytes, with the machine-readable reason codes that
//! dead letters carry in `Npcmem-Dlq-Reason`.
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

pub mod world;

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
    /// Not produced by validation: a dependency (the database, the LLM provider) refused
    /// what this message asks for in a way no retry can change, e.g. a constraint.
    Refused,
}

impl ReasonCode {
    pub const ALL: [ReasonCode; 11] = [
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
        ReasonCode::Refused,
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
            ReasonCode::Refused => "refused",
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

/// Limits on `conversation.ended`, all configurable by the ingest service.
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
/// `invalid_uuid` (a UUID that does not parse) or `invalid_field` (anything else), each
/// naming the field by its path (`npc.name`, `witness_ids[2]`) and worded in JSON's
/// terms, never Rust's. A `null` `schema_version` is treated as absent (version 1).
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
    serde_path_to_error::deserialize(root).map_err(classify_serde_error)
}

const NUL_ESCAPE: &[u8] = b"\\u0000";

fn classify_serde_error(error: serde_path_to_error::Error<serde_json::Error>) -> ValidationError {
    let path = error.path().to_string();
    let description = error.inner().to_string();
    // The path of a missing field is its parent's; the root's is ".".
    let within = |field: &str| if path == "." { field.to_owned() } else { format!("{path}.{field}") };
    if let Some(rest) = description.strip_prefix("missing field `") {
        let field = within(rest.split('`').next().unwrap_or_default());
        return ValidationError::at_field(ReasonCode::MissingField, field.clone(), format!("{field} is required"));
    }
    let field = if path == "." { "the message".to_owned() } else { path.clone() };
    if description.starts_with("invalid type: null") {
        return ValidationError::at_field(
            ReasonCode::MissingField,
            field.clone(),
            format!("{field} is required, got null"),
        );
    }
    // uuid's serde impl says "UUID parsing failed: …" or "expected a formatted UUID
    // string"; nothing else in our types mentions UUIDs.
    if description.contains("UUID") {
        let detail = description.strip_prefix("UUID parsing failed: ").unwrap_or("");
        let got = description.strip_prefix("invalid type: ").and_then(|rest| rest.split(", expected").next());
        let message = match got {
            Some(got) => format!("{field} must be a UUID string, got {}", json_kind(got)),
            None if !detail.is_empty() => format!("{field} is not a UUID ({detail})"),
            None => format!("{field} is not a UUID"),
        };
        return ValidationError::at_field(ReasonCode::InvalidUuid, field, message);
    }
    ValidationError::at_field(
        ReasonCode::InvalidField,
        field.clone(),
        format!("{field}: {}", plain_serde(&description)),
    )
}

/// Serde's wording without Rust types: "invalid type: string \"Brom\", expected struct
/// Persona" → "must be an object, got a string".
fn plain_serde(description: &str) -> String {
    if let Some(rest) = description.strip_prefix("invalid type: ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("must be {}, got {}", expected_kind(expected), json_kind(got));
    }
    if let Some(rest) = description.strip_prefix("invalid value: ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("must be {}, got {}", expected_kind(expected), got.replace('`', ""));
    }
    description.replace('`', "")
}

/// What serde says it got ("string \"Brom\"", "integer `17`", "map") as JSON calls it.
fn json_kind(got: &str) -> &'static str {
    match got.split_whitespace().next().unwrap_or_default() {
        "string" | "char" => "a string",
        "integer" | "floating" => "a number",
        "boolean" => "true or false",
        "map" => "an object",
        "sequence" => "an array",
        "null" | "unit" => "null",
        _ => "another type",
    }
}

/// What serde says it expected, without Rust type names.
fn expected_kind(expected: &str) -> String {
    let expected = expected.trim();
    if expected.starts_with("struct ") || expected == "a map" || expected.starts_with("map") {
        return "an object".into();
    }
    match expected {
        "a sequence" | "a tuple" => "an array".into(),
        "a string" | "a borrowed string" | "a character" => "a string".into(),
        "a boolean" => "true or false".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number ≥ 0".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        other => other.replace('`', "").replace("variant identifier", "one of the allowed values"),
    }
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
mod tests;
