//! forget-player's reach into JetStream: every message of this world's streams whose body
//! or headers name the player is erased. `STREAM.MSG.DELETE` without `no_erase` makes the
//! server overwrite the stored bytes, not only drop the index entry.
//!
//! Limits streams (events, world, signals, dead letters) can hold days of traffic, so they
//! are read by one ordered consumer each (pushed at full speed, no acks). Work-queue streams
//! (conversations, jobs) refuse a second consumer over their subjects and hold only the
//! backlog, so they are read message by message with `STREAM.MSG.GET`.
//!
//! Messages published while the scan runs are read up to the stream's last sequence when
//! the scan began. Derived messages about the player cannot be published later: the outbox
//! relay publishes inside the transaction that holds the outbox rows, the forget
//! transaction deleted the player's rows after waiting for those locks, and every consumer
//! drops a forgotten player's work.

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::OrderedConfig;
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, RetentionPolicy, Stream};
use async_nats::jetstream::{self, ErrorCode};
use futures::{StreamExt, TryStreamExt};
use npcmem_bus::StreamKind;
use uuid::Uuid;

use crate::connect::Bus;
use crate::error::CliError;

/// Erase requests in flight at once.
const ERASE_WINDOW: usize = 32;

/// What one stream held about the player.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erased {
    pub stream: String,
    pub scanned: u64,
    pub erased: u64,
}

/// The forms a player id takes in a message: hyphenated (how every service writes it) and
/// simple (32 hex digits, which ingest also accepts from a game), matched case-blind.
struct Needles([Vec<u8>; 2]);

impl Needles {
    fn new(player_id: Uuid) -> Self {
        Needles([player_id.hyphenated().to_string().into_bytes(), player_id.simple().to_string().into_bytes()])
    }

    fn found_in(&self, payload: &[u8], headers: Option<&HeaderMap>) -> bool {
        let in_bytes = |bytes: &[u8]| {
            let folded = bytes.to_ascii_lowercase();
            self.0.iter().any(|needle| memchr::memmem::find(&folded, needle).is_some())
        };
        in_bytes(payload)
            || headers.is_some_and(|headers| {
                headers.iter().any(|(name, values)| {
                    in_bytes(AsRef::<str>::as_ref(name).as_bytes())
                        || values.iter().any(|value| in_bytes(value.as_str().as_bytes()))
                })
            })
    }
}

/// Erases, in every stream of this world, the messages that name `player_id`. A stream
/// that does not exist (no service ever started) holds nothing and is skipped.
pub async fn erase_player(bus: &Bus, player_id: Uuid) -> Result<Vec<Erased>, CliError> {
    let needles = Needles::new(player_id);
    let mut report = Vec::new();
    for kind in StreamKind::ALL {
        let name = bus.topology.stream_name(kind);
        let Some(mut stream) = existing_stream(&bus.js, &name).await? else {
            continue;
        };
        let info =
            stream.info().await.map_err(|error| CliError::failed(&format!("cannot read {name}"), error))?.clone();
        let (state, retention) = (info.state.clone(), info.config.retention);
        let (scanned, matching) = if state.messages == 0 {
            (0, Vec::new())
        } else if retention == RetentionPolicy::WorkQueue {
            scan_by_get(&stream, &info.config.subjects, &needles).await?
        } else {
            scan_ordered(&stream, state.last_sequence, &needles).await?
        };
        let erased = erase(&stream, &matching).await?;
        report.push(Erased { stream: name, scanned, erased });
    }
    Ok(report)
}

async fn existing_stream(js: &jetstream::Context, name: &str) -> Result<Option<Stream>, CliError> {
    match js.get_stream(name).await {
        Ok(stream) => Ok(Some(stream)),
        Err(error) => match error.kind() {
            GetStreamErrorKind::JetStream(js_error) if js_error.error_code() == ErrorCode::STREAM_NOT_FOUND => Ok(None),
            _ => Err(CliError::Unreachable {
                dependency: "NATS JetStream",
                target: name.to_string(),
                detail: error.to_string(),
            }),
        },
    }
}

/// Reads the stream from its first message to `last_sequence` with an ordered consumer;
/// returns the messages read and the sequences that name the player.
async fn scan_ordered(stream: &Stream, last_sequence: u64, needles: &Needles) -> Result<(u64, Vec<u64>), CliError> {
    let reading = |error: &dyn std::fmt::Display| {
        CliError::failed(&format!("cannot read {}", stream.cached_info().config.name), error)
    };
    let consumer = stream
        .create_consumer(OrderedConfig { deliver_policy: DeliverPolicy::All, ..Default::default() })
        .await
        .map_err(|error| reading(&error))?;
    let mut messages = consumer.messages().await.map_err(|error| reading(&error))?;
    let (mut scanned, mut matching) = (0, Vec::new());
    while let Some(message) = messages.try_next().await.map_err(|error| reading(&error))? {
        let info = message.info().map_err(|error| reading(&error))?;
        let (sequence, pending) = (info.stream_sequence, info.pending);
        scanned += 1;
        if needles.found_in(&message.payload, message.headers.as_ref()) {
            matching.push(sequence);
        }
        if sequence >= last_sequence || pending == 0 {
            break;
        }
    }
    Ok((scanned, matching))
}

/// Reads a work-queue stream message by message, per subject of the stream.
async fn scan_by_get(stream: &Stream, subjects: &[String], needles: &Needles) -> Result<(u64, Vec<u64>), CliError> {
    let (mut scanned, mut matching) = (0, Vec::new());
    for subject in subjects {
        let mut next_sequence = 1;
        loop {
            match stream.get_first_raw_message_by_subject(subject, next_sequence).await {
                Ok(message) => {
                    next_sequence = message.sequence + 1;
                    scanned += 1;
                    if needles.found_in(&message.payload, Some(&message.headers)) {
                        matching.push(message.sequence);
                    }
                }
                Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => break,
                Err(error) => {
                    return Err(CliError::failed(&format!("cannot read {}", stream.cached_info().config.name), error));
                }
            }
        }
    }
    Ok((scanned, matching))
}

/// Erases `sequences`; one a consumer removed meanwhile (a work queue acknowledged it) is
/// gone already and counts as erased.
async fn erase(stream: &Stream, sequences: &[u64]) -> Result<u64, CliError> {
    let results: Vec<Result<(), CliError>> = futures::stream::iter(sequences.iter().copied())
        .map(|sequence| async move {
            let failure = match stream.delete_message(sequence).await {
                Ok(true) => return Ok(()),
                Ok(false) => "the server did not erase it".to_string(),
                Err(error) => error.to_string(),
            };
            match stream.get_raw_message(sequence).await {
                Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(()),
                _ => Err(CliError::Failed(format!(
                    "cannot erase message {sequence} of {}: {failure}",
                    stream.cached_info().config.name
                ))),
            }
        })
        .buffer_unordered(ERASE_WINDOW)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, CliError>>()?;
    Ok(sequences.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_player_id_is_found_in_any_case_and_form_in_bodies_and_headers() {
        let player = Uuid::parse_str("0b9a44a6-52f7-4f0e-9c1e-2d3c4b5a6f70").unwrap();
        let needles = Needles::new(player);
        assert!(needles.found_in(br#"{"player_id":"0b9a44a6-52f7-4f0e-9c1e-2d3c4b5a6f70"}"#, None));
        assert!(needles.found_in(br#"{"player_id":"0B9A44A6-52F7-4F0E-9C1E-2D3C4B5A6F70"}"#, None));
        assert!(needles.found_in(br#"{"player_id":"0b9a44a652f74f0e9c1e2d3c4b5a6f70"}"#, None));
        let mut headers = HeaderMap::new();
        headers.insert("Npcmem-Orig-Nats-Msg-Id", "conversation-0b9a44a6-52f7-4f0e-9c1e-2d3c4b5a6f70");
        assert!(needles.found_in(b"{}", Some(&headers)));
        assert!(!needles.found_in(br#"{"player_id":"0b9a44a6-52f7-4f0e-9c1e-2d3c4b5a6f71"}"#, Some(&HeaderMap::new())));
        assert!(!needles.found_in(b"", None));
    }
}
