//! Dead letters in the format of docs/wire-protocol.md §8: the original bytes with real-world PII replaced
//! in place, metadata in `Npcmem-Dlq-*` headers, the original headers as `Npcmem-Orig-*`.

use async_nats::HeaderMap;
use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use npcmem_core::redact::PiiRedactor;
use npcmem_core::validate::ReasonCode;

pub const HEADER_REASON: &str = "Npcmem-Dlq-Reason";
pub const HEADER_MESSAGE: &str = "Npcmem-Dlq-Message";
pub const HEADER_CONSUMER: &str = "Npcmem-Dlq-Consumer";
pub const HEADER_SUBJECT: &str = "Npcmem-Dlq-Subject";
pub const HEADER_DELIVERIES: &str = "Npcmem-Dlq-Deliveries";
pub const HEADER_AT: &str = "Npcmem-Dlq-At";
pub const HEADER_TRUNCATED: &str = "Npcmem-Dlq-Truncated";
/// Present when some original headers were left out to keep the letter publishable.
pub const HEADER_HEADERS_TRUNCATED: &str = "Npcmem-Dlq-Headers-Truncated";
pub const ORIGINAL_HEADER_PREFIX: &str = "Npcmem-Orig-";

/// Room left for headers under the stream's max message size: our own (< 2 KiB) plus
/// the copied originals, which are capped at `ORIGINAL_HEADERS_MAX_BYTES`.
const HEADER_ALLOWANCE: usize = 16 * 1024;
const ORIGINAL_HEADERS_MAX_BYTES: usize = 8 * 1024;
const MAX_HEADER_NAME_BYTES: usize = 256;
const MAX_HEADER_VALUE_CHARS: usize = 1_000;

/// What went wrong with one input, as the dead letter reports it.
#[derive(Debug, Clone)]
pub struct DeadLetterCause {
    pub code: ReasonCode,
    pub message: String,
}

/// The message to publish on `P.dlq.<consumer>`.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Dedup id: the source stream sequence, so a retried dead-lettering publishes once.
    pub msg_id: String,
}

pub struct DeadLetterInput<'a> {
    pub consumer: &'a str,
    pub original_subject: &'a str,
    pub original_headers: Option<&'a HeaderMap>,
    pub payload: &'a [u8],
    pub deliveries: i64,
    pub stream_sequence: u64,
    pub cause: &'a DeadLetterCause,
    pub max_message_bytes: usize,
}

pub fn build(input: DeadLetterInput<'_>) -> DeadLetter {
    let mut headers = HeaderMap::new();
    headers.insert(HEADER_REASON, input.cause.code.as_str());
    headers.insert(HEADER_MESSAGE, header_safe(&input.cause.message).as_str());
    headers.insert(HEADER_CONSUMER, input.consumer);
    headers.insert(HEADER_SUBJECT, input.original_subject);
    headers.insert(HEADER_DELIVERIES, input.deliveries.to_string().as_str());
    headers.insert(HEADER_AT, Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true).as_str());
    // Original headers come from the sender: copy them only up to a budget, so a letter
    // always fits under the message size limit and can always be published.
    let mut original_header_bytes = 0usize;
    let mut headers_cut = false;
    if let Some(original) = input.original_headers {
        for (name, values) in original.iter() {
            let name = name.to_string();
            for value in values {
                let value = header_safe(value.as_str());
                let cost = ORIGINAL_HEADER_PREFIX.len() + name.len() + value.len() + 4;
                if name.len() > MAX_HEADER_NAME_BYTES || original_header_bytes + cost > ORIGINAL_HEADERS_MAX_BYTES {
                    headers_cut = true;
                    continue;
                }
                original_header_bytes += cost;
                headers.append(format!("{ORIGINAL_HEADER_PREFIX}{name}").as_str(), value.as_str());
            }
        }
    }
    if headers_cut {
        headers.insert(HEADER_HEADERS_TRUNCATED, "true");
    }
    let mut body = PiiRedactor::shared().redact_bytes(input.payload);
    let body_limit = input.max_message_bytes.saturating_sub(HEADER_ALLOWANCE);
    if body.len() > body_limit {
        headers.insert(HEADER_TRUNCATED, body.len().to_string().as_str());
        body.truncate(body_limit);
    }
    DeadLetter { headers, body: Bytes::from(body), msg_id: format!("dlq-{}-{}", input.consumer, input.stream_sequence) }
}

/// Header values may not hold CR/LF and should stay short; PII is removed as in the body.
fn header_safe(value: &str) -> String {
    let redacted = PiiRedactor::shared().redact(value);
    let single_line: String =
        redacted.chars().map(|c| if c.is_control() { ' ' } else { c }).take(MAX_HEADER_VALUE_CHARS).collect();
    single_line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause() -> DeadLetterCause {
        DeadLetterCause { code: ReasonCode::InvalidJson, message: "bad\r\njson at line 1".into() }
    }

    #[test]
    fn dead_letter_keeps_bytes_and_carries_metadata() {
        let payload = b"\xff\xfe not json, mail bob@example.com";
        let mut original = HeaderMap::new();
        original.insert("Nats-Msg-Id", "abc");
        let cause = cause();
        let letter = build(DeadLetterInput {
            consumer: "ingest",
            original_subject: "npcmem.conversation.ended",
            original_headers: Some(&original),
            payload,
            deliveries: 1,
            stream_sequence: 42,
            cause: &cause,
            max_message_bytes: 1024 * 1024,
        });
        assert!(letter.body.starts_with(b"\xff\xfe not json, mail "));
        assert!(!letter.body.windows(7).any(|w| w == b"bob@exa"));
        assert_eq!(letter.headers.get(HEADER_REASON).map(|v| v.as_str()), Some("invalid_json"));
        assert_eq!(letter.headers.get(HEADER_MESSAGE).map(|v| v.as_str()), Some("bad  json at line 1"));
        assert_eq!(letter.headers.get("Npcmem-Orig-Nats-Msg-Id").map(|v| v.as_str()), Some("abc"));
        assert_eq!(letter.msg_id, "dlq-ingest-42");
    }

    #[test]
    fn huge_original_headers_are_capped_so_the_letter_fits() {
        let mut original = HeaderMap::new();
        for i in 0..200 {
            original.insert(format!("X-Junk-{i}").as_str(), "v".repeat(200).as_str());
        }
        let cause = cause();
        let letter = build(DeadLetterInput {
            consumer: "ingest",
            original_subject: "s",
            original_headers: Some(&original),
            payload: &vec![b'a'; 1024 * 1024],
            deliveries: 1,
            stream_sequence: 7,
            cause: &cause,
            max_message_bytes: 1024 * 1024,
        });
        let header_bytes: usize = letter
            .headers
            .iter()
            .map(|(name, values)| values.iter().map(|v| name.to_string().len() + v.as_str().len() + 4).sum::<usize>())
            .sum();
        assert!(header_bytes < HEADER_ALLOWANCE, "{header_bytes}");
        assert!(letter.body.len() + header_bytes < 1024 * 1024);
        assert_eq!(letter.headers.get(HEADER_HEADERS_TRUNCATED).map(|v| v.as_str()), Some("true"));
    }

    #[test]
    fn oversized_body_is_truncated_and_says_so() {
        let payload = vec![b'a'; 100 * 1024];
        let cause = cause();
        let letter = build(DeadLetterInput {
            consumer: "ingest",
            original_subject: "s",
            original_headers: None,
            payload: &payload,
            deliveries: 5,
            stream_sequence: 1,
            cause: &cause,
            max_message_bytes: 64 * 1024,
        });
        assert_eq!(letter.body.len(), 48 * 1024);
        assert_eq!(letter.headers.get(HEADER_TRUNCATED).map(|v| v.as_str()), Some("102400"));
    }
}
