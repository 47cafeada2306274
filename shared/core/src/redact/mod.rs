//! Real-world PII redaction.
//!
//! Conversation text passes through here before it is stored or reaches an LLM, and
//! dead-letter bodies before they are published. Character names, roles and factions
//! are game data, not PII, and are left alone.
//!
//! Replaced, in this order: emails → `[EMAIL]`, IBANs that pass mod 97 → `[IBAN]`, bank
//! account numbers the text calls so (and UK sort code + account) → `[ACCOUNT]`, payment
//! card numbers that pass the Luhn check → `[CARD]`, SSNs → `[SSN]`, street addresses of
//! the US, UK, France and Germany with their postcode and city → `[ADDRESS]`, phone
//! numbers (valid, by the phone-number library, for the US, UK, France or Germany, or
//! international) → `[PHONE]`, IPv6 and IPv4 addresses → `[IP]`, real names given out
//! of character → `[NAME]`. IBANs and accounts go before cards because their digits may
//! pass Luhn; cards, SSNs and addresses before phones because the phone pass would
//! otherwise eat parts of them (a ZIP+4 "02179-5541" is also a German number); IPs after
//! phones because a phone glued to an address ("+44 20 7946 0958fe80::1") only
//! separates from it once the phone is replaced. The order keeps one round of passes
//! enough for ordinary text, and rounds repeat until nothing changes, so redacting
//! twice gives the same text as redacting once (a property test checks it).
//!
//! One engine (`regex::bytes`) serves both `&str` and raw bytes: every pattern starts
//! and ends on a whole character (ASCII, or a Unicode class matching whole UTF-8
//! sequences), so on valid UTF-8 the matches fall on char boundaries and the two entry
//! points agree by construction.

mod address;
mod bank;
pub mod corpus;
mod name;
mod phone;

use std::borrow::Cow;
use std::net::Ipv6Addr;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::bytes::Regex;

use crate::wire::ConversationEnded;

pub use bank::iban_checksum_valid;

pub const EMAIL_TOKEN: &str = "[EMAIL]";
pub const PHONE_TOKEN: &str = "[PHONE]";
pub const ADDRESS_TOKEN: &str = "[ADDRESS]";
pub const SSN_TOKEN: &str = "[SSN]";
pub const CARD_TOKEN: &str = "[CARD]";
pub const IP_TOKEN: &str = "[IP]";
pub const IBAN_TOKEN: &str = "[IBAN]";
pub const ACCOUNT_TOKEN: &str = "[ACCOUNT]";
pub const NAME_TOKEN: &str = "[NAME]";

/// The original design's email pattern with its `[A-Z|a-z]` typo fixed, `_` allowed in the local
/// part (the original design misses `john_doe@…`) and no `\b` at either end: a card glued to the
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

/// Rounds end when one changes nothing. Every replacement removes a digit, `@` or `:`
/// (no token holds one) or, for names, a capitalised word after a cue that no token
/// can stand in for, so rounds are few; this bound keeps crafted input from costing
/// more than a few scans. Real text needs one round plus the check round.
const MAX_ROUNDS: usize = 8;

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
    pub ibans: u32,
    pub accounts: u32,
    pub names: u32,
}

impl RedactionReport {
    pub fn total(&self) -> u32 {
        self.counts().iter().map(|(_, count)| count).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// Every kind with its count, named as in metrics labels.
    pub fn counts(&self) -> [(&'static str, u32); 9] {
        [
            ("email", self.emails),
            ("phone", self.phones),
            ("address", self.addresses),
            ("ssn", self.ssns),
            ("card", self.cards),
            ("ip", self.ips),
            ("iban", self.ibans),
            ("account", self.accounts),
            ("name", self.names),
        ]
    }

    fn counter(&mut self, kind: PiiKind) -> &mut u32 {
        match kind {
            PiiKind::Email => &mut self.emails,
            PiiKind::Iban => &mut self.ibans,
            PiiKind::Account => &mut self.accounts,
            PiiKind::Card => &mut self.cards,
            PiiKind::Ssn => &mut self.ssns,
            PiiKind::Ipv6 | PiiKind::Ipv4 => &mut self.ips,
            PiiKind::Phone => &mut self.phones,
            PiiKind::Address => &mut self.addresses,
            PiiKind::Name => &mut self.names,
        }
    }

    fn record(&mut self, kind: PiiKind, replacements: usize) {
        let replacements = u32::try_from(replacements).unwrap_or(u32::MAX);
        let counter = self.counter(kind);
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
        self.ibans = self.ibans.saturating_add(other.ibans);
        self.accounts = self.accounts.saturating_add(other.accounts);
        self.names = self.names.saturating_add(other.names);
    }
}

/// The passes, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PiiKind {
    Email,
    Iban,
    Account,
    Card,
    Ssn,
    Phone,
    Ipv6,
    Ipv4,
    Address,
    Name,
}

impl PiiKind {
    const IN_ORDER: [PiiKind; 10] = [
        PiiKind::Email,
        PiiKind::Iban,
        PiiKind::Account,
        PiiKind::Card,
        PiiKind::Ssn,
        PiiKind::Address,
        PiiKind::Phone,
        PiiKind::Ipv6,
        PiiKind::Ipv4,
        PiiKind::Name,
    ];

    /// The passes of the redactor before issue 20.
    const US_FORMATS_ORDER: [PiiKind; 7] =
        [PiiKind::Email, PiiKind::Card, PiiKind::Ssn, PiiKind::Phone, PiiKind::Ipv6, PiiKind::Ipv4, PiiKind::Address];

    fn token(self) -> &'static [u8] {
        let token = match self {
            PiiKind::Email => EMAIL_TOKEN,
            PiiKind::Iban => IBAN_TOKEN,
            PiiKind::Account => ACCOUNT_TOKEN,
            PiiKind::Card => CARD_TOKEN,
            PiiKind::Ssn => SSN_TOKEN,
            PiiKind::Ipv6 | PiiKind::Ipv4 => IP_TOKEN,
            PiiKind::Phone => PHONE_TOKEN,
            PiiKind::Address => ADDRESS_TOKEN,
            PiiKind::Name => NAME_TOKEN,
        };
        token.as_bytes()
    }
}

/// Which characters a text contains. Each pattern needs some of them (an email an `@`
/// and a dot, a card 13 digits, a name an out-of-character cue, …), so most chat lines
/// skip most regexes, and lines without digits, `@`, `:` or a cue skip them all.
struct Prefilter {
    digit_count: usize,
    has_at_sign: bool,
    has_colon: bool,
    has_dot: bool,
    has_name_cue: bool,
}

/// The fewest digits each digit-based pattern can match.
const MIN_SSN_DIGITS: usize = 9;
const MIN_IPV4_DIGITS: usize = 4;

impl Prefilter {
    fn scan(bytes: &[u8], names: Option<&name::NameFinder>) -> Self {
        let mut prefilter =
            Prefilter { digit_count: 0, has_at_sign: false, has_colon: false, has_dot: false, has_name_cue: false };
        for &byte in bytes {
            match byte {
                b'0'..=b'9' => prefilter.digit_count += 1,
                b'@' => prefilter.has_at_sign = true,
                b':' => prefilter.has_colon = true,
                b'.' => prefilter.has_dot = true,
                _ => {}
            }
        }
        prefilter.has_name_cue = names.is_some_and(|names| names.may_contain(bytes));
        prefilter
    }

    fn nothing_to_find(&self) -> bool {
        self.digit_count == 0 && !self.has_at_sign && !self.has_colon && !self.has_name_cue
    }

    fn may_contain(&self, kind: PiiKind) -> bool {
        match kind {
            PiiKind::Email => self.has_at_sign && self.has_dot,
            PiiKind::Iban => self.digit_count >= bank::MIN_IBAN_DIGITS,
            PiiKind::Account => self.digit_count >= bank::MIN_ACCOUNT_DIGITS,
            PiiKind::Card => self.digit_count >= *CARD_DIGITS.start(),
            PiiKind::Ssn => self.digit_count >= MIN_SSN_DIGITS,
            PiiKind::Phone => self.digit_count >= phone::MIN_DIGITS,
            PiiKind::Ipv6 => self.has_colon,
            PiiKind::Ipv4 => self.has_dot && self.digit_count >= MIN_IPV4_DIGITS,
            PiiKind::Address => self.digit_count >= 1,
            PiiKind::Name => self.has_name_cue,
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
    uuid: Regex,
    phone: phone::PhoneFinder,
    bank: bank::BankFinder,
    address: address::AddressFinder,
    name: name::NameFinder,
    /// The redactor as it was before issue 20 (US formats only), for comparisons.
    us_formats_only: bool,
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
            uuid: compile(UUID_PATTERN),
            phone: phone::PhoneFinder::new(compile),
            bank: bank::BankFinder::new(compile),
            address: address::AddressFinder::new(compile),
            name: name::NameFinder::new(compile),
            us_formats_only: false,
        }
    }

    /// The redactor as it was before issue 20: US-shaped phone numbers by regex, US
    /// street addresses without postcode or city, no IBANs, accounts or names. Kept
    /// only as the baseline of `npcmem bench pii`; never use it on real text.
    #[doc(hidden)]
    pub fn us_formats_only() -> Self {
        PiiRedactor { us_formats_only: true, ..Self::new() }
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
                // Unreachable: matches start and end on whole characters and the tokens
                // are ASCII, so valid UTF-8 in gives valid UTF-8 out.
                debug_assert!(false, "redaction broke UTF-8: {error}");
                String::from_utf8_lossy(error.as_bytes()).into_owned()
            })),
        }
    }

    /// Runs rounds of all passes until a round changes nothing (at most
    /// [`MAX_ROUNDS`]). One round nearly always suffices; the check round exists
    /// because a replacement changes the neighbours of nearby text, which can turn a
    /// near miss of an earlier pass into a match.
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
        let prefilter = Prefilter::scan(&text, (!self.us_formats_only).then_some(&self.name));
        if prefilter.nothing_to_find() {
            return (text, false);
        }
        let mut current = text;
        let mut changed = false;
        let kinds: &[PiiKind] = if self.us_formats_only { &PiiKind::US_FORMATS_ORDER } else { &PiiKind::IN_ORDER };
        for &kind in kinds {
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
        if !spans.is_empty() && !matches!(kind, PiiKind::Email | PiiKind::Name) {
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
            PiiKind::Iban => self.bank.iban_spans(haystack),
            PiiKind::Account => self.bank.account_spans(haystack),
            PiiKind::Ssn => whole_matches(&self.ssn),
            PiiKind::Name => self.name.spans(haystack),
            PiiKind::Address if self.us_formats_only => self.address.legacy_spans(haystack),
            PiiKind::Address => self.address.spans(haystack),
            PiiKind::Phone if self.us_formats_only => self.phone.legacy_spans(haystack),
            PiiKind::Phone => self.phone.spans(haystack),
            PiiKind::Card => {
                let mut spans = Vec::new();
                for run in self.digit_run.find_iter(haystack) {
                    card_spans_in_run(run.as_bytes(), run.start(), !self.us_formats_only, &mut spans);
                }
                // After a `+` the digits are an international phone number.
                if !self.us_formats_only {
                    spans.retain(|&(start, _)| start == 0 || haystack[start - 1] != b'+');
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
        }
    }
}

/// Keeps, of spans that overlap, the one starting first (the longest of those starting
/// together); returns them in order.
fn without_overlaps(mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    spans.sort_unstable_by_key(|&(start, end)| (start, std::cmp::Reverse(end)));
    let mut kept: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for span in spans {
        if kept.last().is_none_or(|last| last.1 <= span.0) {
            kept.push(span);
        }
    }
    kept
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
fn card_spans_in_run(run: &[u8], run_offset: usize, zero_never_starts: bool, spans: &mut Vec<(usize, usize)>) {
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
        // No payment card number starts with 0 (ISO/IEC 7812 gives that first digit
        // to no issuer); "0044 7426 732494" is a phone number that may pass Luhn.
        if zero_never_starts && run.get(groups[first_group].0) == Some(&b'0') {
            first_group += 1;
            continue;
        }
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
mod tests;
