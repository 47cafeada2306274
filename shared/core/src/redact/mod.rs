//! Real-world PII redaction (seed §PII Redaction Layer, extended).
//!
//! Conversation text passes through here before it is stored or reaches an LLM, and
//! dead-letter bodies before they are published. Character names, roles and factions
//! are game data, not PII, and are left alone.
//!
//! Replaced, in this order: emails → `[EMAIL]`, payment card numbers that pass the Luhn
//! check → `[CARD]`, SSNs → `[SSN]`, phone numbers → `[PHONE]`, IPv6 and IPv4
//! addresses → `[IP]`, street addresses → `[ADDRESS]`. Cards and SSNs go before phones
//! because the phone pattern would otherwise eat parts of them; IPs go after phones
//! because a phone glued to an address ("+44 20 7946 0958fe80::1") only separates
//! from it once the phone is replaced. Every replacement token is free of digits, `@`
//! and `:`. The order keeps one round of passes enough for ordinary text, and
//! rounds repeat until nothing changes, so redacting twice gives the same text as
//! redacting once (a property test checks it).
//!
//! One engine (`regex::bytes`) serves both `&str` and raw bytes: every pattern starts
//! and ends on ASCII, so on valid UTF-8 the matches fall on char boundaries and the
//! two entry points agree by construction.

use std::borrow::Cow;
use std::net::Ipv6Addr;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::bytes::Regex;

use crate::wire::ConversationEnded;

pub const EMAIL_TOKEN: &str = "[EMAIL]";
pub const PHONE_TOKEN: &str = "[PHONE]";
pub const ADDRESS_TOKEN: &str = "[ADDRESS]";
pub const SSN_TOKEN: &str = "[SSN]";
pub const CARD_TOKEN: &str = "[CARD]";
pub const IP_TOKEN: &str = "[IP]";

/// The seed's email pattern with its `[A-Z|a-z]` typo fixed, `_` allowed in the local
/// part (the seed misses `john_doe@…`) and no `\b` at either end: a card glued to the
/// end ("a@b.co4111…") would otherwise hide the email until the card is replaced,
/// and redacting twice would differ from redacting once.
const EMAIL_PATTERN: &str = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}";

/// A maximal run of digit groups separated by single spaces or dashes; which part of it
/// is a card is decided in code, because the regex crate has no look-around and the
/// Luhn check is arithmetic. No word boundary: a card glued to letters is still a card.
const DIGIT_RUN_PATTERN: &str = r"[0-9]+(?:[ -][0-9]+)*";

/// A UUID: its digit groups are an identifier, never a card, phone or SSN, however
/// they happen to checksum (an id in a dead letter must stay readable).
const UUID_PATTERN: &str = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";

const SSN_PATTERN: &str = r"(?-u:\b)[0-9]{3}-[0-9]{2}-[0-9]{4}(?-u:\b)";

/// Maximal runs of hex digits, dots and colons containing a colon; `Ipv6Addr` decides.
const IPV6_CANDIDATE_PATTERN: &str = r"[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*";

/// Dotted digit runs; four parts of at most three digits, each ≤ 255, are checked in code.
const IPV4_CANDIDATE_PATTERN: &str = r"[0-9]+(?:\.[0-9]+)+";

/// In order: international (`+44 20 7946 0958`, `+1 (555) 123-4567`; its digit count is
/// checked in code), `(555) 123-4567`, and the seed's `555-123-4567` extended with an
/// optional leading `1` and spaces as separators.
const PHONE_PATTERN: &str = concat!(
    r"\+[0-9]{1,3}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,4})){2,6}",
    r"|\([0-9]{3}\)[ .-]?[0-9]{3}[ .-]?[0-9]{4}(?-u:\b)",
    r"|(?-u:\b)(?:1[ .-])?[0-9]{3}[ .-]?[0-9]{3}[ .-]?[0-9]{4}(?-u:\b)",
);

/// The seed's `\d{1,5}\s\w+\s(?:Street|St|…)` (case-insensitive, as the seed applies
/// `re.IGNORECASE`), extended with more suffixes, house numbers like `221B`, and
/// two-word street names when both words are capitalised ("12 Old Mill Road"). Only
/// capitalised pairs, so "3 orcs on the road" stays game text.
const ADDRESS_PATTERN: &str = concat!(
    r"(?i)(?-u:\b)[0-9]{1,5}[a-z]?\s(?:\w+|(?-i:[A-Z]\w*\s[A-Z]\w*))\s",
    r"(?:street|st|avenue|ave|road|rd|drive|dr|lane|ln|boulevard|blvd|court|ct|way|place|pl)",
    r"(?-u:\b)",
);

/// E.164 allows at most 15 digits; fewer than 8 is a game number like "+10 20 30".
/// Every round that changes the text removes at least one digit, `@` or `:` (all
/// tokens are free of them), so rounds always end; this bound keeps crafted input from
/// costing more than a few scans. Real text needs one round plus the check round.
const MAX_ROUNDS: usize = 8;

const INTERNATIONAL_PHONE_DIGITS: std::ops::RangeInclusive<usize> = 8..=15;
const CARD_DIGITS: std::ops::RangeInclusive<usize> = 13..=19;

/// How many replacements of each kind one redaction made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RedactionReport {
    pub emails: u32,
    pub phones: u32,
    pub addresses: u32,
    pub ssns: u32,
    pub cards: u32,
    pub ips: u32,
}

impl RedactionReport {
    pub fn total(&self) -> u32 {
        self.emails + self.phones + self.addresses + self.ssns + self.cards + self.ips
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    fn record(&mut self, kind: PiiKind, replacements: usize) {
        let replacements = u32::try_from(replacements).unwrap_or(u32::MAX);
        let counter = match kind {
            PiiKind::Email => &mut self.emails,
            PiiKind::Card => &mut self.cards,
            PiiKind::Ssn => &mut self.ssns,
            PiiKind::Ipv6 | PiiKind::Ipv4 => &mut self.ips,
            PiiKind::Phone => &mut self.phones,
            PiiKind::Address => &mut self.addresses,
        };
        *counter = counter.saturating_add(replacements);
    }
}

impl std::ops::AddAssign for RedactionReport {
    fn add_assign(&mut self, other: Self) {
        self.emails = self.emails.saturating_add(other.emails);
        self.phones = self.phones.saturating_add(other.phones);
        self.addresses = self.addresses.saturating_add(other.addresses);
        self.ssns = self.ssns.saturating_add(other.ssns);
        self.cards = self.cards.saturating_add(other.cards);
        self.ips = self.ips.saturating_add(other.ips);
    }
}

/// The passes, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PiiKind {
    Email,
    Card,
    Ssn,
    Phone,
    Ipv6,
    Ipv4,
    Address,
}

impl PiiKind {
    const IN_ORDER: [PiiKind; 7] =
        [PiiKind::Email, PiiKind::Card, PiiKind::Ssn, PiiKind::Phone, PiiKind::Ipv6, PiiKind::Ipv4, PiiKind::Address];

    fn token(self) -> &'static [u8] {
        let token = match self {
            PiiKind::Email => EMAIL_TOKEN,
            PiiKind::Card => CARD_TOKEN,
            PiiKind::Ssn => SSN_TOKEN,
            PiiKind::Ipv6 | PiiKind::Ipv4 => IP_TOKEN,
            PiiKind::Phone => PHONE_TOKEN,
            PiiKind::Address => ADDRESS_TOKEN,
        };
        token.as_bytes()
    }
}

/// Which characters a text contains. Each pattern needs some of them (an email an `@`
/// and a dot, a card 13 digits, …), so most chat lines skip most regexes, and lines
/// without digits, `@` and `:` skip them all.
struct Prefilter {
    digit_count: usize,
    has_at_sign: bool,
    has_colon: bool,
    has_dot: bool,
}

/// The fewest digits each digit-based pattern can match.
const MIN_PHONE_DIGITS: usize = 8;
const MIN_SSN_DIGITS: usize = 9;
const MIN_IPV4_DIGITS: usize = 4;

impl Prefilter {
    fn scan(bytes: &[u8]) -> Self {
        let mut prefilter = Prefilter { digit_count: 0, has_at_sign: false, has_colon: false, has_dot: false };
        for &byte in bytes {
            match byte {
                b'0'..=b'9' => prefilter.digit_count += 1,
                b'@' => prefilter.has_at_sign = true,
                b':' => prefilter.has_colon = true,
                b'.' => prefilter.has_dot = true,
                _ => {}
            }
        }
        prefilter
    }

    fn nothing_to_find(&self) -> bool {
        self.digit_count == 0 && !self.has_at_sign && !self.has_colon
    }

    fn may_contain(&self, kind: PiiKind) -> bool {
        match kind {
            PiiKind::Email => self.has_at_sign && self.has_dot,
            PiiKind::Card => self.digit_count >= *CARD_DIGITS.start(),
            PiiKind::Ssn => self.digit_count >= MIN_SSN_DIGITS,
            PiiKind::Phone => self.digit_count >= MIN_PHONE_DIGITS,
            PiiKind::Ipv6 => self.has_colon,
            PiiKind::Ipv4 => self.has_dot && self.digit_count >= MIN_IPV4_DIGITS,
            PiiKind::Address => self.digit_count >= 1,
        }
    }
}

/// Compiled PII patterns. Build once (or use [`PiiRedactor::shared`]) and reuse: it is
/// cheap to share across threads.
#[derive(Debug, Clone)]
pub struct PiiRedactor {
    email: Regex,
    digit_run: Regex,
    ssn: Regex,
    ipv6_candidate: Regex,
    ipv4_candidate: Regex,
    phone: Regex,
    address: Regex,
    uuid: Regex,
}

impl Default for PiiRedactor {
    fn default() -> Self {
        Self::new()
    }
}

static SHARED_REDACTOR: LazyLock<PiiRedactor> = LazyLock::new(PiiRedactor::new);

impl PiiRedactor {
    pub fn new() -> Self {
        // The patterns are constants covered by the tests, so compiling cannot fail.
        let compile = |pattern: &str| Regex::new(pattern).expect("static PII pattern compiles");
        PiiRedactor {
            email: compile(EMAIL_PATTERN),
            digit_run: compile(DIGIT_RUN_PATTERN),
            ssn: compile(SSN_PATTERN),
            ipv6_candidate: compile(IPV6_CANDIDATE_PATTERN),
            ipv4_candidate: compile(IPV4_CANDIDATE_PATTERN),
            phone: compile(PHONE_PATTERN),
            address: compile(ADDRESS_PATTERN),
            uuid: compile(UUID_PATTERN),
        }
    }

    /// A process-wide instance, compiled on first use.
    pub fn shared() -> &'static PiiRedactor {
        &SHARED_REDACTOR
    }

    /// Redacts `text`; returns it borrowed, without allocating, when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut report = RedactionReport::default();
        self.redact_str_counting(text, &mut report)
    }

    /// Redacts `text` and says what was replaced.
    pub fn redact_with_report(&self, text: &str) -> (String, RedactionReport) {
        let mut report = RedactionReport::default();
        let redacted = self.redact_str_counting(text, &mut report).into_owned();
        (redacted, report)
    }

    /// Redacts raw bytes: matches are replaced and every other byte, valid UTF-8 or
    /// not, is kept as it was, so a dead letter keeps the original payload otherwise.
    /// On valid UTF-8 it gives exactly the bytes of [`PiiRedactor::redact`].
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut report = RedactionReport::default();
        self.redact_bytes_counting(bytes, &mut report).into_owned()
    }

    /// Redacts every message text and the location of a conversation. Names, roles and
    /// factions are game data and stay as they are.
    pub fn redact_conversation(&self, conversation: &mut ConversationEnded) -> RedactionReport {
        let mut report = RedactionReport::default();
        for message in &mut conversation.messages {
            if let Cow::Owned(redacted) = self.redact_str_counting(&message.text, &mut report) {
                message.text = redacted;
            }
        }
        if let Some(location) = conversation.location.as_mut()
            && let Cow::Owned(redacted) = self.redact_str_counting(location, &mut report)
        {
            *location = redacted;
        }
        report
    }

    fn redact_str_counting<'a>(&self, text: &'a str, report: &mut RedactionReport) -> Cow<'a, str> {
        match self.redact_bytes_counting(text.as_bytes(), report) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8(bytes).unwrap_or_else(|error| {
                // Unreachable: matches start and end on ASCII bytes and the tokens are
                // ASCII, so valid UTF-8 in gives valid UTF-8 out.
                debug_assert!(false, "redaction broke UTF-8: {error}");
                String::from_utf8_lossy(error.as_bytes()).into_owned()
            })),
        }
    }

    /// Runs rounds of all passes until a round changes nothing (at most
    /// [`MAX_ROUNDS`]). One round nearly always suffices; the check round exists
    /// because a replacement changes the neighbours of nearby text, which can turn a
    /// near miss of an earlier pass into a match ("+44 20 7946 0958 124 12 Main St":
    /// once the address is gone, the phone number has few enough digits).
    fn redact_bytes_counting<'a>(&self, bytes: &'a [u8], report: &mut RedactionReport) -> Cow<'a, [u8]> {
        let mut current = Cow::Borrowed(bytes);
        for _ in 0..MAX_ROUNDS {
            let (redacted, changed) = self.redact_round(current, report);
            current = redacted;
            if !changed {
                break;
            }
        }
        current
    }

    /// One run of every pass in order; says whether anything was replaced.
    fn redact_round<'a>(&self, text: Cow<'a, [u8]>, report: &mut RedactionReport) -> (Cow<'a, [u8]>, bool) {
        let prefilter = Prefilter::scan(&text);
        if prefilter.nothing_to_find() {
            return (text, false);
        }
        let mut current = text;
        let mut changed = false;
        for kind in PiiKind::IN_ORDER {
            if !prefilter.may_contain(kind) {
                continue;
            }
            let spans = self.find_spans(kind, &current);
            if spans.is_empty() {
                continue;
            }
            report.record(kind, spans.len());
            current = Cow::Owned(replace_spans(&current, &spans, kind.token()));
            changed = true;
        }
        (current, changed)
    }

    /// Non-overlapping `(start, end)` byte ranges to replace, in increasing order; none
    /// inside a UUID (looked for only when there is a candidate, which is rare).
    fn find_spans(&self, kind: PiiKind, haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut spans = self.candidate_spans(kind, haystack);
        if !spans.is_empty() && kind != PiiKind::Email {
            let uuids: Vec<(usize, usize)> =
                self.uuid.find_iter(haystack).map(|found| (found.start(), found.end())).collect();
            spans.retain(|(start, end)| {
                !uuids.iter().any(|(uuid_start, uuid_end)| start < uuid_end && uuid_start < end)
            });
        }
        spans
    }

    fn candidate_spans(&self, kind: PiiKind, haystack: &[u8]) -> Vec<(usize, usize)> {
        let whole_matches = |regex: &Regex| -> Vec<(usize, usize)> {
            regex.find_iter(haystack).map(|found| (found.start(), found.end())).collect()
        };
        match kind {
            PiiKind::Email => whole_matches(&self.email),
            PiiKind::Ssn => whole_matches(&self.ssn),
            PiiKind::Address => whole_matches(&self.address),
            PiiKind::Card => {
                let mut spans = Vec::new();
                for run in self.digit_run.find_iter(haystack) {
                    card_spans_in_run(run.as_bytes(), run.start(), &mut spans);
                }
                spans
            }
            PiiKind::Ipv6 => self
                .ipv6_candidate
                .find_iter(haystack)
                .filter_map(|found| ipv6_span(haystack, found.start(), found.end()))
                .collect(),
            PiiKind::Ipv4 => self
                .ipv4_candidate
                .find_iter(haystack)
                .filter(|found| is_standalone(haystack, found.start(), found.end()) && is_dotted_quad(found.as_bytes()))
                .map(|found| (found.start(), found.end()))
                .collect(),
            PiiKind::Phone => self
                .phone
                .find_iter(haystack)
                .filter(|found| {
                    let candidate = found.as_bytes();
                    if candidate.first() != Some(&b'+') {
                        return true;
                    }
                    // The international form has no trailing `\b`; one that stops in
                    // the middle of a digit run is part of some longer number.
                    let stops_mid_number = haystack.get(found.end()).is_some_and(u8::is_ascii_digit);
                    let digits = candidate.iter().filter(|byte| byte.is_ascii_digit()).count();
                    !stops_mid_number && INTERNATIONAL_PHONE_DIGITS.contains(&digits)
                })
                .map(|found| (found.start(), found.end()))
                .collect(),
        }
    }
}

fn replace_spans(haystack: &[u8], spans: &[(usize, usize)], token: &[u8]) -> Vec<u8> {
    let mut output = Vec::with_capacity(haystack.len());
    let mut copied_up_to = 0;
    for &(start, end) in spans {
        debug_assert!(copied_up_to <= start && start < end && end <= haystack.len());
        output.extend_from_slice(&haystack[copied_up_to..start]);
        output.extend_from_slice(token);
        copied_up_to = end;
    }
    output.extend_from_slice(&haystack[copied_up_to..]);
    output
}

/// Finds card numbers inside one run of digit groups ("4111 1111 1111 1111", maybe
/// with other numbers around it). A card starts and ends on group boundaries, has 13–19
/// digits and passes Luhn; scanning left to right, the longest such span wins.
/// A single group of more than 19 digits is no card at all.
fn card_spans_in_run(run: &[u8], run_offset: usize, spans: &mut Vec<(usize, usize)>) {
    let digit_count = run.iter().filter(|byte| byte.is_ascii_digit()).count();
    if digit_count < *CARD_DIGITS.start() {
        return;
    }
    let groups: Vec<(usize, usize)> = run
        .split(|byte| !byte.is_ascii_digit())
        .scan(0usize, |offset, group| {
            let start = *offset;
            *offset += group.len() + 1;
            Some((start, start + group.len()))
        })
        .collect();

    let mut first_group = 0;
    while first_group < groups.len() {
        let mut digits_so_far = 0;
        let mut longest_card_end = None;
        for (last_group, &(group_start, group_end)) in groups.iter().enumerate().skip(first_group) {
            digits_so_far += group_end - group_start;
            if digits_so_far > *CARD_DIGITS.end() {
                break;
            }
            let span = &run[groups[first_group].0..group_end];
            if CARD_DIGITS.contains(&digits_so_far) && luhn_valid_bytes(span) {
                longest_card_end = Some(last_group);
            }
        }
        match longest_card_end {
            Some(last_group) => {
                spans.push((run_offset + groups[first_group].0, run_offset + groups[last_group].1));
                first_group = last_group + 1;
            }
            None => first_group += 1,
        }
    }
}

/// True when `digits` — ASCII digits, optionally separated by spaces or dashes — has
/// at least two digits and passes the Luhn checksum used by payment cards. Any other
/// character makes it false.
pub fn luhn_valid(digits: &str) -> bool {
    luhn_valid_bytes(digits.as_bytes())
}

fn luhn_valid_bytes(digits: &[u8]) -> bool {
    let mut checksum = 0u32;
    let mut digit_count = 0usize;
    for &byte in digits.iter().rev() {
        match byte {
            b'0'..=b'9' => {
                let digit = u32::from(byte - b'0');
                // Every second digit from the right is doubled, and 2-digit results
                // are reduced by summing their digits (equivalently, minus 9).
                let contribution = if !digit_count.is_multiple_of(2) {
                    let doubled = digit * 2;
                    if doubled > 9 { doubled - 9 } else { doubled }
                } else {
                    digit
                };
                checksum += contribution;
                digit_count += 1;
            }
            b' ' | b'-' => {}
            _ => return false,
        }
    }
    digit_count >= 2 && checksum.is_multiple_of(10)
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Not glued to a word, or to a replacement token, on either side ("v1.2.3.4" is a
/// version, not an address). Tokens count as words because a later pass may turn a
/// word into a token ("12 Main St::1" → "[ADDRESS]::1"), and the second redaction
/// must decide as the first did.
fn is_standalone(haystack: &[u8], start: usize, end: usize) -> bool {
    let glued_before = start
        .checked_sub(1)
        .and_then(|index| haystack.get(index))
        .is_some_and(|&byte| is_word_byte(byte) || byte == b']');
    let glued_after = haystack.get(end).is_some_and(|&byte| is_word_byte(byte) || byte == b'[');
    !glued_before && !glued_after
}

fn is_dotted_quad(candidate: &[u8]) -> bool {
    let mut part_count = 0;
    for part in candidate.split(|&byte| byte == b'.') {
        part_count += 1;
        let in_range = !part.is_empty()
            && part.len() <= 3
            && part.iter().fold(0u32, |value, &digit| value * 10 + u32::from(digit - b'0')) <= 255;
        if !in_range {
            return false;
        }
    }
    part_count == 4
}

/// The span of an IPv6 address inside a candidate run, if it is one. A trailing
/// sentence dot or colon is not part of the address.
fn ipv6_span(haystack: &[u8], start: usize, end: usize) -> Option<(usize, usize)> {
    if !is_standalone(haystack, start, end) {
        return None;
    }
    let mut address_end = end;
    while address_end > start && haystack[address_end - 1] == b'.' {
        address_end -= 1;
    }
    let mut candidates = vec![address_end];
    let ends_with_single_colon =
        address_end >= start + 2 && haystack[address_end - 1] == b':' && haystack[address_end - 2] != b':';
    if ends_with_single_colon {
        candidates.push(address_end - 1);
    }
    candidates.into_iter().find_map(|candidate_end| {
        let text = std::str::from_utf8(&haystack[start..candidate_end]).ok()?;
        let address = Ipv6Addr::from_str(text).ok()?;
        // "::" alone is punctuation far more often than the unspecified address.
        (!address.is_unspecified()).then_some((start, candidate_end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{NpcInfo, PlayerInfo, Speaker, TranscriptMessage};
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    fn redact(text: &str) -> String {
        PiiRedactor::shared().redact(text).into_owned()
    }

    fn report(text: &str) -> RedactionReport {
        PiiRedactor::shared().redact_with_report(text).1
    }

    fn assert_untouched(text: &str) {
        let redacted = PiiRedactor::shared().redact(text);
        assert!(matches!(redacted, Cow::Borrowed(_)), "{text:?} must stay as it is, got {redacted:?}");
    }

    #[test]
    fn patterns_compile() {
        let _ = PiiRedactor::new();
    }

    #[test]
    fn emails_are_redacted() {
        assert_eq!(redact("mail me at aria.smith+mud@example.co.uk!"), "mail me at [EMAIL]!");
        assert_eq!(redact("BROM@FORGE.IO."), "[EMAIL].");
        assert_eq!(report("a@b.com and c@d.org").emails, 2);
        assert_untouched("at the @tavern");
        assert_untouched("user@localhost");
        assert_eq!(redact("john_doe@mail.example"), "[EMAIL]");
        assert_eq!(redact("write a@b.co4111111111111111"), "write [EMAIL][CARD]");
    }

    #[test]
    fn phone_numbers_are_redacted() {
        for (text, expected) in [
            ("call 555-123-4567 now", "call [PHONE] now"),
            ("call 555.123.4567", "call [PHONE]"),
            ("call 5551234567", "call [PHONE]"),
            ("call 555 123 4567", "call [PHONE]"),
            ("call (555) 123-4567.", "call [PHONE]."),
            ("call 1-555-123-4567", "call [PHONE]"),
            ("ring +44 20 7946 0958 today", "ring [PHONE] today"),
            ("ring +1 (555) 123-4567", "ring [PHONE]"),
            ("ring +33 1 23 45 67 89", "ring [PHONE]"),
            ("ring +49-30-1234567", "ring [PHONE]"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        assert_eq!(report("555-123-4567, +44 20 7946 0958").phones, 2);
    }

    #[test]
    fn game_numbers_are_not_phones() {
        for text in [
            "10 gold coins",
            "level 42",
            "room 3-2",
            "+5 sword of smiting",
            "+10 20 30 damage",
            "I paid 150 gold for 3 potions",
            "year 1042 of the third age",
            "roll 2d6+3",
            "the 12:30 ferry",
            "score 3-1, 2-2 draw",
            "version 1.2.3",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn street_addresses_are_redacted() {
        for (text, expected) in [
            ("I live at 123 Main Street.", "I live at [ADDRESS]."),
            ("123 main st", "[ADDRESS]"),
            ("42 Elm Ave", "[ADDRESS]"),
            ("7 Abbey Road", "[ADDRESS]"),
            ("10 Downing Rd", "[ADDRESS]"),
            ("99 Mulholland Drive", "[ADDRESS]"),
            ("3 Penny Lane", "[ADDRESS]"),
            ("4 Privet Ln", "[ADDRESS]"),
            ("9000 Sunset Boulevard", "[ADDRESS]"),
            ("1 Hollywood Blvd", "[ADDRESS]"),
            ("12 Kings Court", "[ADDRESS]"),
            ("5 Oak Ct", "[ADDRESS]"),
            ("100 Abbey WAY", "[ADDRESS]"),
            ("8 Carlton Place", "[ADDRESS]"),
            ("8 Carlton Pl", "[ADDRESS]"),
            ("221B Baker Street", "[ADDRESS]"),
            ("12 Old Mill Road", "[ADDRESS]"),
            ("at 1600 Pennsylvania Avenue, DC", "at [ADDRESS], DC"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        assert_eq!(report("1 A St and 2 B Rd").addresses, 2);
    }

    #[test]
    fn game_text_is_not_an_address() {
        for text in [
            "I killed 3 orcs on the road",
            "10 gold coins on the street",
            "take 2 steps down the lane",
            "give me 5 ways to win",
            "the 3rd street urchin",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn ssns_are_redacted() {
        assert_eq!(redact("my ssn is 123-45-6789."), "my ssn is [SSN].");
        assert_eq!(report("123-45-6789").ssns, 1);
        assert_eq!(report("123-45-6789").phones, 0);
        assert_untouched("room 12-34-56");
        assert_untouched("code 1234-56-789");
    }

    #[test]
    fn luhn_checks_card_numbers() {
        for valid in [
            "4111111111111111",
            "4111 1111 1111 1111",
            "4111-1111-1111-1111",
            "5500005555555559",
            "378282246310005",
            "6011111111111117",
            "4222222222222",
            "79927398713",
        ] {
            assert!(luhn_valid(valid), "{valid}");
        }
        for invalid in ["4111111111111112", "1234567890123456", "", "0", "4111x1111", "79927398710"] {
            assert!(!luhn_valid(invalid), "{invalid}");
        }
    }

    #[test]
    fn digit_groups_inside_a_uuid_are_never_redacted() {
        // "22793205-7507-00" is 14 digits that pass the Luhn check.
        let id = "22793205-7507-00ce-9637-1fbfbcb19920";
        assert!(luhn_valid("22793205750700"));
        assert_eq!(redact(&format!("{{\"conversation_id\":\"{id}\"}}")), format!("{{\"conversation_id\":\"{id}\"}}"));
        assert_eq!(
            redact("card 4111 1111 1111 1111 for order 31b8f7e3-3049-0014-4847-2055fdc9aa28"),
            "card [CARD] for order 31b8f7e3-3049-0014-4847-2055fdc9aa28"
        );
    }

    #[test]
    fn luhn_valid_card_numbers_are_redacted() {
        for (text, expected) in [
            ("card 4111111111111111 exp 12/27", "card [CARD] exp 12/27"),
            ("card 4111 1111 1111 1111.", "card [CARD]."),
            ("card 4111-1111-1111-1111", "card [CARD]"),
            ("amex 378282246310005", "amex [CARD]"),
            ("visa13 4222222222222", "visa13 [CARD]"),
            ("xx5500005555555559yy", "xx[CARD]yy"),
            ("order 12 4111 1111 1111 1111", "order 12 [CARD]"),
            ("4111 1111 1111 1111 2024", "[CARD] 2024"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        assert_eq!(report("4111111111111111 and 5500005555555559").cards, 2);
    }

    #[test]
    fn numbers_failing_luhn_are_not_cards() {
        assert_eq!(report("ref 1234567890123456").cards, 0);
        assert_untouched("ref 1234567890123456");
        assert_untouched("ids 1234 5678 9012 3456");
        // 20 contiguous digits are an id, whatever their checksum.
        assert_untouched("tx 41111111111111111111");
        // Two spaces break a card.
        assert_untouched("4111  1111  1111  1112");
    }

    #[test]
    fn ip_addresses_are_redacted() {
        for (text, expected) in [
            ("from 192.168.0.1.", "from [IP]."),
            ("host 8.8.8.8:53", "host [IP]:53"),
            ("255.255.255.255", "[IP]"),
            ("v6 2001:0db8:85a3:0000:0000:8a2e:0370:7334 ok", "v6 [IP] ok"),
            ("v6 2001:db8::1", "v6 [IP]"),
            ("local fe80::1ff:fe23:4567:890a.", "local [IP]."),
            ("loop ::1", "loop [IP]"),
            ("mapped ::ffff:192.0.2.128", "mapped [IP]"),
            ("(dead::beef)", "([IP])"),
            ("at 2001:db8::1: bye", "at [IP]: bye"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        assert_eq!(report("1.2.3.4 and ::1").ips, 2);
    }

    #[test]
    fn things_that_only_look_like_ips_stay() {
        for text in [
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "v1.2.3.4",
            "meet at 10:30:45",
            "std::vector",
            "a :: b",
            "MAC 00:1A:2B:3C:4D:5E",
            "Foo::bar::baz",
            "ratio 3:2",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn text_without_pii_is_borrowed() {
        assert_untouched("");
        assert_untouched("Greetings, traveller. The forge is hot today.");
        assert_untouched("Ünïcödé только текст 日本語");
        assert_untouched("10 gold coins, level 42, room 3-2");
    }

    #[test]
    fn several_kinds_in_one_text() {
        let text =
            "I'm Aria, aria@example.com, 555-123-4567, 12 Main St, card 4111111111111111, ssn 123-45-6789, ip 10.0.0.1";
        let (redacted, report) = PiiRedactor::shared().redact_with_report(text);
        assert_eq!(redacted, "I'm Aria, [EMAIL], [PHONE], [ADDRESS], card [CARD], ssn [SSN], ip [IP]");
        assert_eq!(report, RedactionReport { emails: 1, phones: 1, addresses: 1, ssns: 1, cards: 1, ips: 1 });
        assert_eq!(report.total(), 6);
    }

    #[test]
    fn cascading_matches_settle_in_one_call() {
        // The phone has too many digits until the address after it is replaced.
        let text = "+44 20 7946 0958 124 12 Main St";
        let (redacted, report) = PiiRedactor::shared().redact_with_report(text);
        assert_eq!(redacted, "[PHONE] [ADDRESS]");
        assert_eq!(report.phones, 1);
        assert_eq!(report.addresses, 1);
        assert_eq!(redact(&redacted), redacted);
    }

    #[test]
    fn redact_bytes_keeps_invalid_utf8_around_matches() {
        let mut payload = b"\xff\xfe{\"text\":\"mail a@b.com \xc3 or 555-123-4567\"}\x80".to_vec();
        let redacted = PiiRedactor::shared().redact_bytes(&payload);
        assert_eq!(redacted, b"\xff\xfe{\"text\":\"mail [EMAIL] \xc3 or [PHONE]\"}\x80".to_vec());
        payload.truncate(2);
        assert_eq!(PiiRedactor::shared().redact_bytes(&payload), payload);
    }

    #[test]
    fn redact_conversation_touches_texts_and_location_only() {
        let at = DateTime::<Utc>::from_timestamp(1_750_000_000, 0).expect("valid timestamp");
        let mut conversation = ConversationEnded {
            schema_version: 1,
            conversation_id: Uuid::from_u128(1),
            npc_id: Uuid::from_u128(2),
            player_id: Uuid::from_u128(3),
            npc: NpcInfo {
                name: "Agent 555-123-4567".into(),
                role: Some("clerk at 12 Main St".into()),
                factions: vec!["guild@example.com".into()],
            },
            player: PlayerInfo { name: "Aria".into(), factions: vec![] },
            location: Some("42 Elm Ave".into()),
            started_at: at,
            ended_at: at,
            messages: vec![
                TranscriptMessage { speaker: Speaker::Player, text: "write to aria@example.com".into() },
                TranscriptMessage { speaker: Speaker::Npc, text: "Aye, 10 gold.".into() },
            ],
        };
        let report = PiiRedactor::shared().redact_conversation(&mut conversation);
        assert_eq!(conversation.messages[0].text, "write to [EMAIL]");
        assert_eq!(conversation.messages[1].text, "Aye, 10 gold.");
        assert_eq!(conversation.location.as_deref(), Some("[ADDRESS]"));
        assert_eq!(conversation.npc.name, "Agent 555-123-4567");
        assert_eq!(conversation.npc.role.as_deref(), Some("clerk at 12 Main St"));
        assert_eq!(conversation.npc.factions, ["guild@example.com"]);
        assert_eq!(report.emails, 1);
        assert_eq!(report.addresses, 1);
        assert_eq!(report.total(), 2);
    }

    #[test]
    fn reports_add_up() {
        let mut total = RedactionReport { emails: 1, ..RedactionReport::default() };
        total += RedactionReport { emails: 2, ips: 1, ..RedactionReport::default() };
        assert_eq!(total.emails, 3);
        assert_eq!(total.total(), 4);
        assert!(RedactionReport::default().is_empty());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Fragments that exercise every pattern and the places where they meet.
        fn pii_like_text() -> impl Strategy<Value = String> {
            let fragment = prop_oneof![
                Just("4111 1111 1111 1111".to_owned()),
                Just("5500005555555559".to_owned()),
                Just("555-123-4567".to_owned()),
                Just("(555) 123-4567".to_owned()),
                Just("+44 20 7946 0958".to_owned()),
                Just("123-45-6789".to_owned()),
                Just("12 Main St".to_owned()),
                Just("192.168.0.1".to_owned()),
                Just("fe80::1".to_owned()),
                Just("a@b.co".to_owned()),
                Just("Street".to_owned()),
                Just("+1".to_owned()),
                Just("fe80".to_owned()),
                Just("::".to_owned()),
                Just("4111".to_owned()),
                Just("Main".to_owned()),
                "[0-9]{1,6}",
                "[ .:@+()-]",
                "[a-fA-F]{1,3}",
                "[A-Za-z]{1,5}",
                " ",
            ];
            prop::collection::vec(fragment, 0..16).prop_map(|fragments| fragments.concat())
        }

        fn luhn_check_digit(payload: &[u8]) -> u8 {
            // The digit that makes payload + digit pass Luhn.
            (0..=9u8)
                .find(|digit| {
                    let mut candidate = payload.to_vec();
                    candidate.push(b'0' + digit);
                    luhn_valid_bytes(&candidate)
                })
                .map(|digit| b'0' + digit)
                .unwrap_or(b'0')
        }

        proptest! {
            #[test]
            fn redaction_is_idempotent(text in pii_like_text()) {
                let redactor = PiiRedactor::shared();
                let once = redactor.redact(&text).into_owned();
                let twice = redactor.redact(&once).into_owned();
                prop_assert_eq!(twice, once);
            }

            #[test]
            fn redaction_of_any_text_is_idempotent(text in any::<String>()) {
                let redactor = PiiRedactor::shared();
                let once = redactor.redact(&text).into_owned();
                prop_assert_eq!(redactor.redact(&once).into_owned(), once);
            }

            #[test]
            fn text_without_digits_at_signs_or_colons_is_unchanged(text in "[^0-9@:]{0,200}") {
                let redacted = PiiRedactor::shared().redact(&text);
                prop_assert!(matches!(redacted, Cow::Borrowed(_)));
            }

            #[test]
            fn luhn_valid_cards_in_letters_are_removed(
                prefix in "[A-Za-z ]{0,10}",
                suffix in "[A-Za-z ]{0,10}",
                card_payload in prop::collection::vec(0u8..10, 12..=18),
                separator in prop_oneof![Just(""), Just(" "), Just("-")],
            ) {
                let mut digits: Vec<u8> = card_payload.iter().map(|digit| b'0' + digit).collect();
                digits.push(luhn_check_digit(&digits));
                let card_digits = String::from_utf8(digits).expect("ascii digits");
                let card: String = card_digits
                    .as_bytes()
                    .chunks(4)
                    .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
                    .collect::<Vec<_>>()
                    .join(separator);
                prop_assert!(luhn_valid(&card));
                let text = format!("{prefix}{card}{suffix}");
                let redacted = PiiRedactor::shared().redact(&text).into_owned();
                prop_assert!(!redacted.contains(&card), "{} → {}", text, redacted);
                prop_assert!(
                    !redacted.chars().any(|character| character.is_ascii_digit()),
                    "{} → {}", text, redacted
                );
            }

            #[test]
            fn redact_bytes_agrees_with_redact_on_utf8(text in pii_like_text(), noise in any::<String>()) {
                let redactor = PiiRedactor::shared();
                for input in [text.as_str(), noise.as_str()] {
                    let as_bytes = redactor.redact_bytes(input.as_bytes());
                    prop_assert_eq!(as_bytes, redactor.redact(input).as_bytes().to_vec());
                }
            }

            #[test]
            fn redact_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                let redacted = PiiRedactor::shared().redact_bytes(&bytes);
                let again = PiiRedactor::shared().redact_bytes(&redacted);
                prop_assert_eq!(again, redacted);
            }
        }
    }
}
