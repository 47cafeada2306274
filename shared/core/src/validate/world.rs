//! Field checks of the world messages after [`decode_message`]: whatever
//! PostgreSQL would refuse, or a game can only have sent by mistake, is refused here with
//! its reason. The gossip service writes a batch of world messages in one transaction, so
//! a message refused only by the database would fail the whole batch and, after
//! `max_deliver` tries, dead-letter its good neighbours as `max_deliveries`.
//!
//! Numbers (importance, confidence, drives, mood intensity) are clamped by the receiver,
//! as everywhere else, not refused.

use uuid::Uuid;

use super::{MAX_FACTION_CHARS, MAX_FACTIONS, MAX_LOCATION_CHARS, ReasonCode, ValidationError, check_string};
use crate::wire::{NpcMoved, NpcProfile, Observation, WorldFact};

/// A fact's content, in chars: `knowledge_facts.content` (migration 0007).
pub const MAX_FACT_CHARS: usize = 2000;
/// An NPC's name and role and a mood, in chars: as `conversation.ended`'s names by default.
pub const MAX_NAME_CHARS: usize = 100;
pub const MAX_TAGS: usize = 32;
pub const MAX_TAG_CHARS: usize = 100;

/// A world message whose fields can be checked once decoded.
pub trait WorldMessage: serde::de::DeserializeOwned {
    fn check(&self) -> Result<(), ValidationError>;
}

/// [`decode_message`](super::decode_message), then the message's own checks. Field rules:
/// ids the nil UUID → `invalid_uuid`; a fact's content over [`MAX_FACT_CHARS`] →
/// `text_too_long`; anything else wrong (blank content, room id, name or mood, a room id
/// over [`MAX_LOCATION_CHARS`], a name, role or mood over [`MAX_NAME_CHARS`], more than
/// [`MAX_TAGS`] tags or one blank or over [`MAX_TAG_CHARS`], more than [`MAX_FACTIONS`]
/// factions or one blank or over [`MAX_FACTION_CHARS`]) → `invalid_field`.
pub fn decode_world<T: WorldMessage>(bytes: &[u8], max_payload_bytes: usize) -> Result<T, ValidationError> {
    let message: T = super::decode_message(bytes, max_payload_bytes)?;
    message.check()?;
    Ok(message)
}

impl WorldMessage for NpcMoved {
    fn check(&self) -> Result<(), ValidationError> {
        id("npc_id", self.npc_id)?;
        required_text("room_id", &self.room_id, MAX_LOCATION_CHARS, ReasonCode::InvalidField)
    }
}

impl WorldMessage for NpcProfile {
    fn check(&self) -> Result<(), ValidationError> {
        id("npc_id", self.npc_id)?;
        required_text("name", &self.name, MAX_NAME_CHARS, ReasonCode::InvalidField)?;
        if let Some(role) = &self.role {
            check_string("role", role, MAX_NAME_CHARS, ReasonCode::InvalidField)?;
        }
        list("factions", &self.factions, MAX_FACTIONS, MAX_FACTION_CHARS)?;
        if let Some(mood) = &self.mood {
            required_text("mood.mood", &mood.mood, MAX_NAME_CHARS, ReasonCode::InvalidField)?;
        }
        Ok(())
    }
}

impl WorldMessage for Observation {
    fn check(&self) -> Result<(), ValidationError> {
        id("observation_id", self.observation_id)?;
        ids("witness_ids", &self.witness_ids)?;
        fact_fields(self.subject_id, &self.content, &self.tags)
    }
}

impl WorldMessage for WorldFact {
    fn check(&self) -> Result<(), ValidationError> {
        id("fact_id", self.fact_id)?;
        ids("npc_ids", &self.npc_ids)?;
        fact_fields(self.subject_id, &self.content, &self.tags)
    }
}

fn fact_fields(subject_id: Option<Uuid>, content: &str, tags: &[String]) -> Result<(), ValidationError> {
    if let Some(subject) = subject_id {
        id("subject_id", subject)?;
    }
    required_text("content", content, MAX_FACT_CHARS, ReasonCode::TextTooLong)?;
    list("tags", tags, MAX_TAGS, MAX_TAG_CHARS)
}

fn id(field: &str, id: Uuid) -> Result<(), ValidationError> {
    if id.is_nil() {
        return Err(ValidationError::at_field(ReasonCode::InvalidUuid, field, format!("{field} is the nil UUID")));
    }
    Ok(())
}

fn ids(field: &str, ids: &[Uuid]) -> Result<(), ValidationError> {
    ids.iter().enumerate().try_for_each(|(index, value)| id(&format!("{field}[{index}]"), *value))
}

/// Text that must hold more than whitespace, within `max_chars` (`too_long` beyond).
fn required_text(field: &str, text: &str, max_chars: usize, too_long: ReasonCode) -> Result<(), ValidationError> {
    check_string(field, text, max_chars, too_long)?;
    if text.trim().is_empty() {
        return Err(ValidationError::at_field(ReasonCode::InvalidField, field, format!("{field} is blank")));
    }
    Ok(())
}

/// At most `max_entries` names, none blank or over `max_chars`.
fn list(field: &str, entries: &[String], max_entries: usize, max_chars: usize) -> Result<(), ValidationError> {
    if entries.len() > max_entries {
        return Err(ValidationError::at_field(
            ReasonCode::InvalidField,
            field,
            format!("{field} has {} entries, limit {max_entries}", entries.len()),
        ));
    }
    entries.iter().enumerate().try_for_each(|(index, entry)| {
        required_text(&format!("{field}[{index}]"), entry, max_chars, ReasonCode::InvalidField)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn decoded<T: WorldMessage>(document: Value) -> Result<T, ValidationError> {
        decode_world(&serde_json::to_vec(&document).unwrap(), 256 * 1024)
    }

    fn refused<T: WorldMessage + std::fmt::Debug>(document: Value) -> (ReasonCode, Option<String>) {
        let error = decoded::<T>(document).expect_err("refused");
        (error.code, error.field)
    }

    fn observation(content: Value, tags: Value) -> Value {
        json!({"observation_id": Uuid::new_v4(), "witness_ids": [Uuid::new_v4()], "category": "world_event",
               "content": content, "tags": tags, "importance": 0.8, "at": "2026-12-03T10:00:00Z"})
    }

    #[test]
    fn the_design_examples_pass() {
        let npc = Uuid::new_v4();
        decoded::<NpcMoved>(
            json!({"schema_version": 1, "npc_id": npc, "room_id": "tavern-1", "at": "2026-12-03T10:00:00Z"}),
        )
        .expect("a move");
        decoded::<NpcProfile>(json!({"npc_id": npc, "name": "Tobin", "role": "stable boy", "factions": [],
            "drives": {"social": 0.8, "safety": 0.3, "loyalty": 0.5, "curiosity": 0.6},
            "mood": {"mood": "anxious", "intensity": 0.6, "expires_at": "2026-12-03T11:00:00Z"}}))
        .expect("a profile");
        decoded::<Observation>(observation(json!("Bandits raided the mill"), json!(["bandits"])))
            .expect("an observation");
        decoded::<WorldFact>(json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "subject_id": null,
            "category": "location_info", "content": "The cave has treasure", "tags": ["cave"], "importance": 0.6,
            "confidence": 1.0, "expires_at": null}))
        .expect("a fact");
    }

    #[test]
    fn content_the_database_would_refuse_is_refused_with_its_field() {
        let at_limit = "é".repeat(MAX_FACT_CHARS);
        decoded::<Observation>(observation(json!(at_limit), json!([]))).expect("2000 chars fit");
        let over = "é".repeat(MAX_FACT_CHARS + 1);
        assert_eq!(
            refused::<Observation>(observation(json!(over), json!([]))),
            (ReasonCode::TextTooLong, Some("content".into()))
        );
        assert_eq!(
            refused::<Observation>(observation(json!(" \n "), json!([]))),
            (ReasonCode::InvalidField, Some("content".into()))
        );
        assert_eq!(
            refused::<Observation>(observation(json!("Wolves"), json!(["ok", ""]))),
            (ReasonCode::InvalidField, Some("tags[1]".into()))
        );
        let many: Vec<String> = (0..=MAX_TAGS).map(|index| format!("t{index}")).collect();
        assert_eq!(
            refused::<Observation>(observation(json!("Wolves"), json!(many))),
            (ReasonCode::InvalidField, Some("tags".into()))
        );
    }

    #[test]
    fn rooms_names_moods_and_ids_are_checked() {
        let npc = Uuid::new_v4();
        let room = |room: &str| json!({"npc_id": npc, "room_id": room, "at": "2026-12-03T10:00:00Z"});
        decoded::<NpcMoved>(room(&"r".repeat(MAX_LOCATION_CHARS))).expect("200 chars fit");
        assert_eq!(refused::<NpcMoved>(room(&"r".repeat(201))), (ReasonCode::InvalidField, Some("room_id".into())));
        assert_eq!(refused::<NpcMoved>(room("")), (ReasonCode::InvalidField, Some("room_id".into())));
        let nil = json!({"npc_id": Uuid::nil(), "room_id": "hall", "at": "2026-12-03T10:00:00Z"});
        assert_eq!(refused::<NpcMoved>(nil), (ReasonCode::InvalidUuid, Some("npc_id".into())));

        let profile = |name: &str, mood: &str| json!({"npc_id": npc, "name": name, "mood": {"mood": mood}});
        assert_eq!(refused::<NpcProfile>(profile(" ", "calm")), (ReasonCode::InvalidField, Some("name".into())));
        assert_eq!(refused::<NpcProfile>(profile("Tobin", "")), (ReasonCode::InvalidField, Some("mood.mood".into())));
        let factions = json!({"npc_id": npc, "name": "Tobin", "factions": ["guild", " "]});
        assert_eq!(refused::<NpcProfile>(factions), (ReasonCode::InvalidField, Some("factions[1]".into())));

        let fact = json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc, Uuid::nil()], "category": "world_event",
                          "content": "The king is dead", "importance": 0.9});
        assert_eq!(refused::<WorldFact>(fact), (ReasonCode::InvalidUuid, Some("npc_ids[1]".into())));
    }
}
