//! Phone numbers. A cheap pattern finds runs of digit groups; which part of a run is a
//! phone number is decided by libphonenumber's metadata (the `phonenumber` crate), so
//! national formats of other countries are found without a regex per country.

use phonenumber::country::Id;
use regex::bytes::Regex;

/// A maximal run of digit groups joined by one separator (space, dot, dash, slash) or
/// parentheses, optionally after a `+`: "+44 (0)20 7946 0958", "030/12345678".
const RUN_PATTERN: &str = r"\+?\(?[0-9]+\)?(?:[ .\-/]?\(?[0-9]+\)?)*";

/// The NANP's own punctuation: `555-123-4567`, `(555) 123-4567`, `+1 555.123.4567`. A
/// number written so is a phone number even where the library finds its area code
/// unassigned (the 555 numbers of films and examples are written this way).
const NANP_DISPLAY_PATTERN: &str = r"^(?:\+?1[ .-]?)?(?:\([0-9]{3}\)[ .-]?|[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}$";

/// The phone pattern of the redactor before issue 20 (US shapes and `+` followed by
/// groups), kept as the baseline of `npcmem bench pii`.
const LEGACY_PATTERN: &str = concat!(
    r"\+[0-9]{1,3}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,4})){2,6}",
    r"|\([0-9]{3}\)[ .-]?[0-9]{3}[ .-]?[0-9]{4}(?-u:\b)",
    r"|(?-u:\b)(?:1[ .-])?[0-9]{3}[ .-]?[0-9]{3}[ .-]?[0-9]{4}(?-u:\b)",
);

/// E.164 allows at most 15 digits after the `+`; fewer than 8 is a game number like
/// "+10 20 30". Nationally: an international call prefix `00` adds two.
const INTERNATIONAL_DIGITS: std::ops::RangeInclusive<usize> = 8..=15;
const NATIONAL_DIGITS: std::ops::RangeInclusive<usize> = 8..=13;
const IDD_DIGITS: std::ops::RangeInclusive<usize> = 10..=17;

/// A phone number is written in at most this many groups ("+33 (0)6 12 34 56 78" has
/// seven); the bound keeps a long list of small numbers from costing many parses.
const MAX_GROUPS: usize = 8;

/// Nationally written numbers are tried as numbers of these countries: each of them
/// writes its numbers with a leading trunk `0` (and `00` before a country code).
const TRUNK_ZERO_REGIONS: [Id; 3] = [Id::GB, Id::FR, Id::DE];

/// The fewest digits a phone number can have, for the prefilter.
pub(super) const MIN_DIGITS: usize = 8;

#[derive(Debug, Clone)]
pub(super) struct PhoneFinder {
    run: Regex,
    nanp_display: Regex,
    legacy: Regex,
}

impl PhoneFinder {
    pub(super) fn new(compile: impl Fn(&str) -> Regex) -> Self {
        PhoneFinder {
            run: compile(RUN_PATTERN),
            nanp_display: compile(NANP_DISPLAY_PATTERN),
            legacy: compile(LEGACY_PATTERN),
        }
    }

    /// Phone numbers in `haystack`, as non-overlapping byte ranges in order.
    pub(super) fn spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        for (window_start, window_end) in windows(haystack) {
            let window = &haystack[..window_end];
            let mut from = window_start;
            while let Some(run) = self.run.find_at(window, from) {
                if run.as_bytes().iter().filter(|byte| byte.is_ascii_digit()).count() >= MIN_DIGITS {
                    self.spans_in_run(haystack, run.start(), run.end(), &mut spans);
                }
                from = run.end().max(run.start() + 1);
            }
        }
        // What the pattern before issue 20 found stays a phone number where the library
        // sees none (unallocated or fictional numbers such as "+44 7700 900123" or
        // "5551234567"): the redactor finds at least what it found before.
        let legacy: Vec<(usize, usize)> = self
            .legacy_spans(haystack)
            .into_iter()
            .filter(|&(start, end)| !spans.iter().any(|&(kept_start, kept_end)| start < kept_end && kept_start < end))
            .collect();
        if !legacy.is_empty() {
            spans.extend(legacy);
            spans.sort_unstable();
        }
        spans
    }

    /// Left to right over the groups of a run, the longest valid number starting at a
    /// group wins, and the search goes on after it ("room 214 07700 900123" keeps 214).
    fn spans_in_run(&self, haystack: &[u8], run_start: usize, run_end: usize, spans: &mut Vec<(usize, usize)>) {
        let groups = digit_groups(haystack, run_start, run_end);
        // After a `+`, the groups that follow are the rest of that number: "+44 20 7946
        // 0958" must not lose only "20 7946 0958" when the whole is no valid number.
        let starts_inside = haystack[run_start] != b'+';
        let mut first = 0;
        while first < groups.len() {
            if first > 0 && !starts_inside && spans.last().is_none_or(|span| span.1 <= run_start) {
                break;
            }
            let found = (first..groups.len().min(first + MAX_GROUPS))
                .rev()
                .map(|last| candidate(haystack, run_start, run_end, &groups, first, last))
                .find(|&(start, end)| self.is_phone_number(haystack, start, end, &groups[first..]));
            match found {
                Some(span) => {
                    spans.push(span);
                    first = groups.iter().position(|group| group.0 >= span.1).unwrap_or(groups.len());
                }
                None => first += 1,
            }
        }
    }

    fn is_phone_number(&self, haystack: &[u8], start: usize, end: usize, groups: &[(usize, usize)]) -> bool {
        if !is_standalone(haystack, start, end) {
            return false;
        }
        let Ok(text) = std::str::from_utf8(&haystack[start..end]) else {
            return false;
        };
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_digit).collect();
        let inside: Vec<(usize, usize)> = groups.iter().copied().take_while(|group| group.1 <= end).collect();
        if text.starts_with('+') {
            return INTERNATIONAL_DIGITS.contains(&digits.len())
                && (is_valid(None, text) || self.nanp_display.is_match(text.as_bytes()));
        }
        if looks_like_a_date(haystack, &inside) {
            return false;
        }
        match digits.as_slice() {
            [b'0', b'0', ..] => {
                IDD_DIGITS.contains(&digits.len()) && TRUNK_ZERO_REGIONS.iter().any(|&id| is_valid(Some(id), text))
            }
            [b'0', ..] => {
                NATIONAL_DIGITS.contains(&digits.len())
                    && inside.first().is_some_and(|group| group.1 - group.0 >= 2)
                    && TRUNK_ZERO_REGIONS.iter().any(|&id| is_valid(Some(id), text))
            }
            // Without a trunk 0 only a North American number: 10 digits, or 11 after a 1.
            [first, ..] => {
                let nanp_length = digits.len() == 10 || (digits.len() == 11 && *first == b'1');
                nanp_length && (is_valid(Some(Id::US), text) || self.nanp_display.is_match(text.as_bytes()))
            }
            [] => false,
        }
    }

    /// The phone numbers the redactor found before issue 20.
    pub(super) fn legacy_spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        self.legacy
            .find_iter(haystack)
            .filter(|found| {
                let candidate = found.as_bytes();
                if candidate.first() != Some(&b'+') {
                    return true;
                }
                // The international form has no trailing `\b`; one that stops in the
                // middle of a digit run is part of some longer number.
                let stops_mid_number = haystack.get(found.end()).is_some_and(u8::is_ascii_digit);
                let digits = candidate.iter().filter(|byte| byte.is_ascii_digit()).count();
                !stops_mid_number && INTERNATIONAL_DIGITS.contains(&digits)
            })
            .map(|found| (found.start(), found.end()))
            .collect()
    }
}

/// Stretches of digits and phone punctuation holding at least [`MIN_DIGITS`] digits:
/// the only places a run can be long enough. A byte scan finds them far faster than the
/// run pattern, which has no literal to skip ahead to, scans all text.
fn windows(haystack: &[u8]) -> Vec<(usize, usize)> {
    let mut windows = Vec::new();
    let mut start = 0;
    let mut digits = 0;
    for (index, &byte) in haystack.iter().enumerate() {
        match byte {
            b'0'..=b'9' => digits += 1,
            b' ' | b'.' | b'-' | b'/' | b'(' | b')' | b'+' => {}
            _ => {
                if digits >= MIN_DIGITS {
                    windows.push((start, index));
                }
                start = index + 1;
                digits = 0;
            }
        }
    }
    if digits >= MIN_DIGITS {
        windows.push((start, haystack.len()));
    }
    windows
}

fn is_valid(region: Option<Id>, text: &str) -> bool {
    phonenumber::parse(region, text).is_ok_and(|number| phonenumber::is_valid(&number))
}

/// The `(start, end)` byte ranges of the digit groups of a run.
fn digit_groups(haystack: &[u8], run_start: usize, run_end: usize) -> Vec<(usize, usize)> {
    let mut groups = Vec::new();
    let mut index = run_start;
    while index < run_end {
        if haystack[index].is_ascii_digit() {
            let start = index;
            while index < run_end && haystack[index].is_ascii_digit() {
                index += 1;
            }
            groups.push((start, index));
        } else {
            index += 1;
        }
    }
    groups
}

/// The text from group `first` to group `last`, with the parentheses around them and,
/// from the first group of the run, its `+`.
fn candidate(
    haystack: &[u8],
    run_start: usize,
    run_end: usize,
    groups: &[(usize, usize)],
    first: usize,
    last: usize,
) -> (usize, usize) {
    let mut start = groups[first].0;
    if start > run_start && haystack[start - 1] == b'(' {
        start -= 1;
    }
    if first == 0 && haystack[run_start] == b'+' {
        start = run_start;
    }
    let mut end = groups[last].1;
    if end < run_end && haystack[end] == b')' {
        end += 1;
    }
    (start, end)
}

/// Not glued to a word on either side ("ABC12345678", "v0201.1234.5678"), nor part of
/// an identifier whose next part starts with a letter ("03048308-4643-c7ba-…", a UUID
/// whose digit groups would otherwise cost a validation each), nor part of a clock
/// time ("18:09:01.925571796" in every RFC 3339 timestamp with nanoseconds, "2026-12-05
/// 18:09").
fn is_standalone(haystack: &[u8], start: usize, end: usize) -> bool {
    let byte_at = |index: Option<usize>| index.and_then(|index| haystack.get(index)).copied();
    let is_word = |byte: Option<u8>| byte.is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
    let joins = |byte: Option<u8>| matches!(byte, Some(b'-' | b'.'));
    let before = byte_at(start.checked_sub(1));
    let after = byte_at(Some(end));
    let clock_time = before == Some(b':') && byte_at(start.checked_sub(2)).is_some_and(|byte| byte.is_ascii_digit());
    let glued_before = is_word(before)
        || before == Some(b'.')
        || clock_time
        || (joins(before) && is_word(byte_at(start.checked_sub(2))));
    let clock_time_after = after == Some(b':') && byte_at(Some(end + 1)).is_some_and(|byte| byte.is_ascii_digit());
    let glued_after = is_word(after)
        || clock_time_after
        || (joins(after) && byte_at(Some(end + 1)).is_some_and(|byte| byte.is_ascii_alphabetic()));
    !glued_before && !glued_after
}

/// "12/03/2026", "05.06.2026", "2026-03-12": three groups shaped as a date. Some of them
/// are valid German numbers, none of them is meant as one.
fn looks_like_a_date(haystack: &[u8], groups: &[(usize, usize)]) -> bool {
    let [a, b, c] = groups else {
        return false;
    };
    let separators_agree = haystack[a.1] == haystack[b.1] && matches!(haystack[a.1], b'/' | b'.' | b'-');
    let length = |group: &(usize, usize)| group.1 - group.0;
    let day_month_year = length(a) <= 2 && length(b) <= 2 && matches!(length(c), 2 | 4);
    let year_month_day = length(a) == 4 && length(b) <= 2 && length(c) <= 2;
    separators_agree && (day_month_year || year_month_day)
}
