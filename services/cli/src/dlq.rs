//! `npcmem dlq`: the dead letters on `P.dlq.>` (stream `<STREAM_PREFIX>_DLQ`).
//! `replay` republishes a letter's body to its original subject with a new `Nats-Msg-Id`
//! (the original may still sit in the dedup window) and the original headers, then
//! deletes the letter; replays and purges are recorded in admin_actions.

use std::collections::BTreeMap;
use std::io::Write;

use async_nats::HeaderMap;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_nats::jetstream::{self, context::GetStreamErrorKind};
use futures::TryStreamExt;
use npcmem_bus::dlq::{
    HEADER_AT, HEADER_CONSUMER, HEADER_DELIVERIES, HEADER_MESSAGE, HEADER_REASON, HEADER_SUBJECT, HEADER_TRUNCATED,
    ORIGINAL_HEADER_PREFIX,
};
use npcmem_bus::{StreamKind, Topology};
use npcmem_store::admin;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::Context;
use crate::connect::Bus;
use crate::error::CliError;
use crate::table::{Table, time};

/// Added to a replayed message so its consumer's logs can tell it from the original.
pub const HEADER_REPLAYED_FROM: &str = "Npcmem-Replayed-From";

#[derive(Debug, clap::Subcommand)]
pub enum DlqCommand {
    /// List dead letters: sequence, time, consumer, reason, original subject, size.
    List {
        /// Only letters of this consumer (ingest, extract, relate, gossip-learn, …).
        #[arg(long)]
        consumer: Option<String>,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        limit: u64,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print one dead letter's headers and body.
    Show {
        /// The letter's sequence in the DLQ stream (see `dlq list`).
        sequence: u64,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Republish letters to their original subject with a new Nats-Msg-Id, then delete them.
    Replay(Selection),
    /// Delete letters without replaying them.
    Purge {
        #[command(flatten)]
        selection: Selection,
        /// Required with --all.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("letters").required(true).args(["sequence", "all"])))]
pub struct Selection {
    /// The letter's sequence in the DLQ stream (see `dlq list`).
    sequence: Option<u64>,
    /// Every letter (of --consumer when given).
    #[arg(long)]
    all: bool,
    /// With --all: only this consumer's letters.
    #[arg(long, requires = "all")]
    consumer: Option<String>,
}

pub async fn run(context: &Context, command: DlqCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        DlqCommand::List { consumer, limit, json } => {
            let bus = context.bus().await?;
            list(&bus, consumer.as_deref(), limit, json, out).await
        }
        DlqCommand::Show { sequence, json } => {
            let bus = context.bus().await?;
            show(&bus, sequence, json, out).await
        }
        DlqCommand::Replay(selection) => {
            let actor = context.options.actor()?;
            // Postgres first: a change that cannot be recorded is not made.
            let pool = context.postgres().await?;
            let bus = context.bus().await?;
            replay(&bus, &pool, &actor, &selection, out).await
        }
        DlqCommand::Purge { selection, yes } => {
            if selection.all && !yes {
                return Err(CliError::BadInput(
                    "purge --all deletes every selected dead letter; run it again with --yes to do it".into(),
                ));
            }
            let actor = context.options.actor()?;
            let pool = context.postgres().await?;
            let bus = context.bus().await?;
            purge(&bus, &pool, &actor, &selection, out).await
        }
    }
}

/// A dead letter as operators see it.
#[derive(Debug, Serialize)]
struct Letter {
    sequence: u64,
    /// When the consumer dead-lettered it (`Npcmem-Dlq-At`, else the stream's time).
    at: String,
    consumer: String,
    reason: String,
    message: String,
    original_subject: Option<String>,
    deliveries: Option<String>,
    /// Body bytes.
    size: usize,
    /// Set when the body was cut to fit the stream; the value is the original size.
    truncated: Option<String>,
    headers: BTreeMap<String, Vec<String>>,
}

fn header(message: &StreamMessage, name: &str) -> Option<String> {
    message.headers.get(name).map(|value| value.as_str().to_string())
}

impl Letter {
    fn of(message: &StreamMessage, topology: &Topology) -> Self {
        let dlq_prefix = topology.subject("dlq.");
        let consumer = header(message, HEADER_CONSUMER)
            .or_else(|| message.subject.as_str().strip_prefix(&dlq_prefix).map(str::to_string))
            .unwrap_or_else(|| "-".into());
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, values) in message.headers.iter() {
            headers.entry(name.to_string()).or_default().extend(values.iter().map(|value| value.as_str().to_string()));
        }
        Letter {
            sequence: message.sequence,
            at: header(message, HEADER_AT).unwrap_or_else(|| message.time.to_rfc3339()),
            consumer,
            reason: header(message, HEADER_REASON).unwrap_or_else(|| "-".into()),
            message: header(message, HEADER_MESSAGE).unwrap_or_default(),
            original_subject: header(message, HEADER_SUBJECT),
            deliveries: header(message, HEADER_DELIVERIES),
            size: message.payload.len(),
            truncated: header(message, HEADER_TRUNCATED),
            headers,
        }
    }
}

async fn dlq_stream(bus: &Bus) -> Result<Stream, CliError> {
    let name = bus.topology.stream_name(StreamKind::Dlq);
    match bus.js.get_stream(&name).await {
        Ok(stream) => Ok(stream),
        Err(error) => match error.kind() {
            GetStreamErrorKind::JetStream(js_error)
                if js_error.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                Err(CliError::NotFound(format!(
                    "stream {name} does not exist: no service has started with NPCMEM_STREAM_PREFIX {}",
                    bus.topology.stream_prefix()
                )))
            }
            _ => Err(CliError::Unreachable { dependency: "NATS JetStream", target: name, detail: error.to_string() }),
        },
    }
}

/// The subject filter for one consumer's letters or all of them.
fn filter(topology: &Topology, consumer: Option<&str>) -> Result<String, CliError> {
    match consumer {
        None => Ok(topology.subject("dlq.>")),
        Some(name) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') => {
            Ok(topology.dlq(name))
        }
        Some(name) => Err(CliError::BadInput(format!("--consumer {name:?} is not a consumer name"))),
    }
}

/// Letters matching `filter` in sequence order, at most `limit`.
async fn letters(stream: &Stream, filter: &str, limit: u64) -> Result<Vec<StreamMessage>, CliError> {
    let mut found = Vec::new();
    let mut next_sequence = 1;
    while (found.len() as u64) < limit {
        match stream.get_first_raw_message_by_subject(filter, next_sequence).await {
            Ok(message) => {
                next_sequence = message.sequence + 1;
                found.push(message);
            }
            Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => break,
            Err(error) => return Err(CliError::failed("cannot read the DLQ stream", error)),
        }
    }
    Ok(found)
}

async fn letter(stream: &Stream, sequence: u64) -> Result<StreamMessage, CliError> {
    match stream.get_raw_message(sequence).await {
        Ok(message) => Ok(message),
        Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => {
            Err(CliError::NotFound(format!("no dead letter with sequence {sequence}")))
        }
        Err(error) => Err(CliError::failed("cannot read the DLQ stream", error)),
    }
}

async fn list(bus: &Bus, consumer: Option<&str>, limit: u64, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let filter = filter(&bus.topology, consumer)?;
    let stream = dlq_stream(bus).await?;
    let letters: Vec<Letter> =
        letters(&stream, &filter, limit).await?.iter().map(|message| Letter::of(message, &bus.topology)).collect();
    if json {
        let document = serde_json::to_string_pretty(&letters).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{document}")?;
        return Ok(());
    }
    if letters.is_empty() {
        writeln!(out, "no dead letters on {filter}")?;
        return Ok(());
    }
    let mut table = Table::new(&["seq", "at", "consumer", "reason", "subject", "size", "message"]);
    for letter in &letters {
        let at = chrono::DateTime::parse_from_rfc3339(&letter.at)
            .map(|at| time(at.with_timezone(&chrono::Utc)))
            .unwrap_or_else(|_| letter.at.clone());
        let size = match &letter.truncated {
            Some(original) => format!("{} (cut from {original})", letter.size),
            None => letter.size.to_string(),
        };
        table.row(vec![
            letter.sequence.to_string(),
            at,
            letter.consumer.clone(),
            letter.reason.clone(),
            letter.original_subject.clone().unwrap_or_else(|| "-".into()),
            size,
            letter.message.clone(),
        ]);
    }
    table.write(out)?;
    if letters.len() as u64 == limit {
        writeln!(out, "(the first {limit} letters; --limit shows more)")?;
    }
    Ok(())
}

async fn show(bus: &Bus, sequence: u64, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let stream = dlq_stream(bus).await?;
    let message = letter(&stream, sequence).await?;
    let letter = Letter::of(&message, &bus.topology);
    let body = std::str::from_utf8(&message.payload).ok();
    if json {
        let mut document = serde_json::to_value(&letter).map_err(|error| CliError::failed("json", error))?;
        document["body"] = json!(String::from_utf8_lossy(&message.payload));
        document["body_is_utf8"] = json!(body.is_some());
        let text = serde_json::to_string_pretty(&document).map_err(|error| CliError::failed("json", error))?;
        writeln!(out, "{text}")?;
        return Ok(());
    }
    writeln!(out, "sequence {} on {}", letter.sequence, message.subject)?;
    writeln!(out)?;
    writeln!(out, "headers")?;
    let mut headers = Table::new(&["name", "value"]);
    for (name, values) in &letter.headers {
        for value in values {
            headers.row(vec![name.clone(), value.clone()]);
        }
    }
    headers.write(out)?;
    writeln!(out)?;
    match body {
        Some(text) => {
            let pretty = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|value| serde_json::to_string_pretty(&value).ok());
            writeln!(out, "body ({} bytes)", letter.size)?;
            writeln!(out, "{}", pretty.as_deref().unwrap_or(text))?;
        }
        None => {
            writeln!(out, "body ({} bytes, not UTF-8; invalid bytes shown as U+FFFD)", letter.size)?;
            writeln!(out, "{}", String::from_utf8_lossy(&message.payload))?;
        }
    }
    Ok(())
}

/// The original headers (`Npcmem-Orig-*`) without NATS's own (`Nats-Msg-Id` and the
/// other `Nats-*` control headers, which would dedup or reject the republish).
fn replay_headers(letter: &HeaderMap, sequence: u64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, values) in letter.iter() {
        let name = name.to_string();
        let Some(original) = strip_prefix_ignore_case(&name, ORIGINAL_HEADER_PREFIX) else {
            continue;
        };
        if original.is_empty() || original.to_ascii_lowercase().starts_with("nats-") {
            continue;
        }
        for value in values {
            headers.append(original, value.as_str());
        }
    }
    headers.insert(HEADER_REPLAYED_FROM, sequence.to_string().as_str());
    headers
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

/// Why a letter cannot be replayed, if it cannot.
fn unreplayable(letter: &Letter, topology: &Topology) -> Option<String> {
    let Some(subject) = &letter.original_subject else {
        return Some(format!("has no {HEADER_SUBJECT} header"));
    };
    if letter.truncated.is_some() {
        return Some("its body was truncated when it was dead-lettered; replaying it would fail again".into());
    }
    if !subject.starts_with(&topology.subject("")) {
        return Some(format!("its original subject {subject} is outside this world's subject prefix"));
    }
    if subject.starts_with(&topology.subject("dlq.")) {
        return Some(format!("its original subject {subject} is itself a dead-letter subject"));
    }
    None
}

/// The letters a selection names: one sequence, or all (of a consumer).
async fn selected(bus: &Bus, stream: &Stream, selection: &Selection) -> Result<Vec<StreamMessage>, CliError> {
    match selection.sequence {
        Some(sequence) => Ok(vec![letter(stream, sequence).await?]),
        None => letters(stream, &filter(&bus.topology, selection.consumer.as_deref())?, u64::MAX).await,
    }
}

async fn replay(
    bus: &Bus,
    pool: &npcmem_store::PgPool,
    actor: &str,
    selection: &Selection,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let stream = dlq_stream(bus).await?;
    let messages = selected(bus, &stream, selection).await?;
    let (mut replayed, mut failed) = (0usize, 0usize);
    for message in &messages {
        let letter = Letter::of(message, &bus.topology);
        if let Some(reason) = unreplayable(&letter, &bus.topology) {
            writeln!(out, "skipped {}: {reason}", letter.sequence)?;
            failed += 1;
            continue;
        }
        match replay_one(bus, pool, &stream, actor, message, &letter).await {
            Ok(msg_id) => {
                replayed += 1;
                let subject = letter.original_subject.as_deref().unwrap_or_default();
                writeln!(out, "replayed {} to {subject} as {msg_id}", letter.sequence)?;
            }
            Err(error) => {
                failed += 1;
                writeln!(out, "failed {}: {error}", letter.sequence)?;
                if matches!(error, CliError::Unreachable { .. }) {
                    return Err(error);
                }
            }
        }
    }
    writeln!(out, "{replayed} replayed, {failed} not replayed")?;
    if failed > 0 {
        return Err(CliError::Failed(format!("{failed} dead letters were not replayed")));
    }
    Ok(())
}

/// Records, publishes, deletes, commits: the action row only commits once the message is
/// republished and the letter gone. A crash between publish and delete leaves the letter
/// to be replayed again; consumers deduplicate by the message's natural key.
async fn replay_one(
    bus: &Bus,
    pool: &npcmem_store::PgPool,
    stream: &Stream,
    actor: &str,
    message: &StreamMessage,
    letter: &Letter,
) -> Result<String, CliError> {
    let subject = letter.original_subject.clone().unwrap_or_default();
    let msg_id = format!("replay-{}", Uuid::new_v4());
    let mut transaction = pool.begin().await?;
    let details = json!({
        "sequence": letter.sequence,
        "consumer": letter.consumer,
        "reason": letter.reason,
        "subject": subject,
        "msg_id": msg_id,
    });
    admin::record_action(&mut transaction, actor, "dlq.replay", &details).await?;
    let headers = replay_headers(&message.headers, letter.sequence);
    npcmem_bus::publish::publish_with_id(&bus.js, &subject, &msg_id, Some(headers), message.payload.clone())
        .await
        .map_err(|error| CliError::failed("cannot republish", error))?;
    stream
        .delete_message(letter.sequence)
        .await
        .map_err(|error| CliError::failed("republished, but cannot delete the letter", error))?;
    transaction.commit().await?;
    Ok(msg_id)
}

async fn purge(
    bus: &Bus,
    pool: &npcmem_store::PgPool,
    actor: &str,
    selection: &Selection,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let stream = dlq_stream(bus).await?;
    let mut transaction = pool.begin().await?;
    let (details, purged) = match selection.sequence {
        Some(sequence) => {
            let letter = Letter::of(&letter(&stream, sequence).await?, &bus.topology);
            let details = json!({
                "sequence": sequence,
                "consumer": letter.consumer,
                "reason": letter.reason,
                "subject": letter.original_subject,
            });
            admin::record_action(&mut transaction, actor, "dlq.purge", &details).await?;
            stream
                .delete_message(sequence)
                .await
                .map_err(|error| CliError::failed("cannot delete the letter", error))?;
            (details, 1)
        }
        None => {
            let filter = filter(&bus.topology, selection.consumer.as_deref())?;
            let response = stream
                .purge()
                .filter(filter.clone())
                .await
                .map_err(|error| CliError::failed("cannot purge the DLQ stream", error))?;
            let details = json!({ "all": true, "filter": filter, "purged": response.purged });
            admin::record_action(&mut transaction, actor, "dlq.purge", &details).await?;
            (details, response.purged)
        }
    };
    transaction.commit().await?;
    tracing::debug!(%details, "dead letters purged");
    writeln!(out, "purged {purged} dead letters")?;
    Ok(())
}

/// DLQ depth for `stats`: letters in the stream, per consumer where the server reports
/// per-subject counts.
#[derive(Debug, Serialize)]
pub struct Depth {
    pub stream: String,
    /// False before any service has created the topology on these prefixes.
    pub stream_exists: bool,
    pub messages: u64,
    pub bytes: u64,
    pub by_consumer: BTreeMap<String, u64>,
}

pub async fn depth(bus: &Bus) -> Result<Depth, CliError> {
    let mut stream = match dlq_stream(bus).await {
        Ok(stream) => stream,
        Err(CliError::NotFound(_)) => {
            let stream = bus.topology.stream_name(StreamKind::Dlq);
            return Ok(Depth { stream, stream_exists: false, messages: 0, bytes: 0, by_consumer: BTreeMap::new() });
        }
        Err(error) => return Err(error),
    };
    let info = stream.info().await.map_err(|error| CliError::failed("cannot read the DLQ stream's info", error))?;
    let (messages, bytes) = (info.state.messages, info.state.bytes);
    let name = info.config.name.clone();
    let mut by_consumer = BTreeMap::new();
    if messages > 0 {
        let prefix = bus.topology.subject("dlq.");
        let subjects = stream.info_with_subjects(bus.topology.subject("dlq.>")).await;
        match subjects {
            Ok(subjects) => {
                let counts: Vec<(String, usize)> = subjects.try_collect().await.unwrap_or_default();
                for (subject, count) in counts {
                    let consumer = subject.strip_prefix(&prefix).unwrap_or(&subject).to_string();
                    *by_consumer.entry(consumer).or_insert(0) += count as u64;
                }
            }
            Err(error) => tracing::debug!(%error, "per-subject DLQ counts unavailable"),
        }
    }
    Ok(Depth { stream: name, stream_exists: true, messages, bytes, by_consumer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter_for(subject: Option<&str>, truncated: Option<&str>) -> Letter {
        Letter {
            sequence: 1,
            at: String::new(),
            consumer: "ingest".into(),
            reason: "max_deliveries".into(),
            message: String::new(),
            original_subject: subject.map(str::to_string),
            deliveries: None,
            size: 2,
            truncated: truncated.map(str::to_string),
            headers: BTreeMap::new(),
        }
    }

    #[test]
    fn only_letters_with_a_whole_body_and_a_subject_of_this_world_are_replayed() {
        let topology = Topology::new("npcmem", "NPCMEM", Default::default());
        assert_eq!(unreplayable(&letter_for(Some("npcmem.conversation.ended"), None), &topology), None);
        assert!(unreplayable(&letter_for(None, None), &topology).is_some());
        assert!(unreplayable(&letter_for(Some("npcmem.conversation.ended"), Some("2000000")), &topology).is_some());
        assert!(unreplayable(&letter_for(Some("other.conversation.ended"), None), &topology).is_some());
        assert!(unreplayable(&letter_for(Some("npcmem.dlq.ingest"), None), &topology).is_some());
    }

    #[test]
    fn replay_restores_original_headers_but_not_nats_control_headers() {
        let mut letter = HeaderMap::new();
        letter.insert(HEADER_REASON, "max_deliveries");
        letter.insert("Npcmem-Orig-Nats-Msg-Id", "conversation-1");
        letter.insert("Npcmem-Orig-traceparent", "00-abc-def-01");
        letter.insert("npcmem-orig-X-Game", "mud");
        let headers = replay_headers(&letter, 42);
        assert_eq!(headers.get("traceparent").map(|v| v.as_str()), Some("00-abc-def-01"));
        assert_eq!(headers.get("X-Game").map(|v| v.as_str()), Some("mud"));
        assert_eq!(headers.get("Nats-Msg-Id"), None);
        assert_eq!(headers.get(HEADER_REASON), None);
        assert_eq!(headers.get(HEADER_REPLAYED_FROM).map(|v| v.as_str()), Some("42"));
    }
}
