//! Bank details: IBANs (length per country and the ISO 13616 mod-97 check) and bank
//! account numbers, which carry no checksum and are found only where the text says so
//! ("account number 12345678", "sort code 12-34-56", or a sort code with its account).

use regex::bytes::Regex;

/// Two letters, two check digits, then letters and digits, possibly in groups; which
/// prefix is the IBAN is decided in code from the country's length.
const IBAN_CANDIDATE_PATTERN: &str = r"(?-u:\b)[A-Za-z]{2}[0-9]{2}(?:[ -]?[A-Za-z0-9]){10,32}";

/// A UK sort code followed by its 8-digit account: "12-34-56 12345678".
const SORT_CODE_AND_ACCOUNT_PATTERN: &str = r"(?-u:\b)[0-9]{2}-[0-9]{2}-[0-9]{2}[ ,/]{1,3}[0-9]{8}(?-u:\b)";

/// A number right after words that say it is an account (English, German, French). The
/// words stay; only the number group is replaced.
const CUED_ACCOUNT_PATTERN: &str = concat!(
    r"(?i)(?-u:\b)(?:sort[ -]?code|(?:bank[ -])?account|acct\.?|a/c|routing|aba|bsb|",
    r"kontonummer|konto(?:nr\.?)?|bankleitzahl|blz|num[ée]ro de compte|n[°o]\.? de compte|compte)",
    r"(?:\s+(?:number|num|no\.?|nr\.?|#))?\s*(?:is|ist|lautet|est|:|#|=|-)?\s*",
    r"(?P<number>[0-9](?:[0-9]|[ -][0-9]){5,19})(?-u:\b)",
);

/// Words after a number that make it an amount, not an account ("account: 1000000 gold").
const AMOUNT_WORDS: [&str; 16] = [
    "gold", "silver", "copper", "coin", "coins", "gp", "gems", "credits", "platinum", "points", "xp", "exp", "dollars",
    "euros", "pounds", "bucks",
];

/// IBAN length by country (the SWIFT IBAN registry).
const IBAN_LENGTHS: [(&[u8; 2], usize); 78] = [
    (b"AD", 24),
    (b"AE", 23),
    (b"AL", 28),
    (b"AT", 20),
    (b"AZ", 28),
    (b"BA", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"BR", 29),
    (b"BY", 28),
    (b"CH", 21),
    (b"CR", 22),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DK", 18),
    (b"DO", 28),
    (b"EE", 20),
    (b"EG", 29),
    (b"ES", 24),
    (b"FI", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GE", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"GT", 28),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IQ", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"JO", 30),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LC", 32),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"MC", 27),
    (b"MD", 24),
    (b"ME", 22),
    (b"MK", 19),
    (b"MR", 27),
    (b"MT", 31),
    (b"MU", 30),
    (b"NL", 18),
    (b"NO", 15),
    (b"PK", 24),
    (b"PL", 28),
    (b"PS", 29),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"RS", 22),
    (b"SA", 24),
    (b"SC", 31),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"ST", 25),
    (b"SV", 28),
    (b"TL", 23),
    (b"TN", 24),
    (b"TR", 26),
    (b"UA", 29),
    (b"VA", 22),
    (b"VG", 24),
    (b"XK", 20),
    (b"LY", 25),
];

/// The fewest digits of an account number (and of an IBAN, whose check digits alone are
/// two), for the prefilter.
pub(super) const MIN_ACCOUNT_DIGITS: usize = 6;
pub(super) const MIN_IBAN_DIGITS: usize = 2;

#[derive(Debug, Clone)]
pub(super) struct BankFinder {
    iban_candidate: Regex,
    sort_code_and_account: Regex,
    cued_account: Regex,
}

impl BankFinder {
    pub(super) fn new(compile: impl Fn(&str) -> Regex) -> Self {
        BankFinder {
            iban_candidate: compile(IBAN_CANDIDATE_PATTERN),
            sort_code_and_account: compile(SORT_CODE_AND_ACCOUNT_PATTERN),
            cued_account: compile(CUED_ACCOUNT_PATTERN),
        }
    }

    pub(super) fn iban_spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        let mut from = 0;
        while let Some(found) = self.iban_candidate.find_at(haystack, from) {
            match iban_end(haystack, found.start(), found.end()) {
                Some(end) => {
                    spans.push((found.start(), end));
                    from = end;
                }
                None => from = found.start() + 1,
            }
        }
        spans
    }

    pub(super) fn account_spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut spans: Vec<(usize, usize)> =
            self.sort_code_and_account.find_iter(haystack).map(|found| (found.start(), found.end())).collect();
        for captures in self.cued_account.captures_iter(haystack) {
            let Some(number) = captures.name("number") else { continue };
            if !is_amount(haystack, number.end()) {
                spans.push((number.start(), number.end()));
            }
        }
        super::without_overlaps(spans)
    }
}

/// Where the IBAN starting at `start` ends, if the candidate holds one: the first
/// `length` letters and digits, ending at the end of a group, passing mod 97.
fn iban_end(haystack: &[u8], start: usize, candidate_end: usize) -> Option<usize> {
    let country = [haystack[start].to_ascii_uppercase(), haystack[start + 1].to_ascii_uppercase()];
    let length = IBAN_LENGTHS.iter().find(|(code, _)| **code == country)?.1;
    let mut characters = Vec::with_capacity(length);
    let mut end = start;
    for (index, &byte) in haystack[start..candidate_end].iter().enumerate() {
        if byte.is_ascii_alphanumeric() {
            characters.push(byte.to_ascii_uppercase());
            end = start + index + 1;
            if characters.len() == length {
                break;
            }
        }
    }
    let ends_a_group = !haystack.get(end).is_some_and(u8::is_ascii_alphanumeric);
    (characters.len() == length && ends_a_group && iban_checksum_valid(&characters)).then_some(end)
}

/// ISO 13616: the first four characters moved to the end, letters as 10–35, the number
/// mod 97 is 1. Computed digit by digit, so no big integers.
pub fn iban_checksum_valid(iban: &[u8]) -> bool {
    if iban.len() < 5 || !iban[2..4].iter().all(u8::is_ascii_digit) {
        return false;
    }
    let mut remainder = 0u32;
    for &byte in iban[4..].iter().chain(&iban[..4]) {
        remainder = match byte {
            b'0'..=b'9' => (remainder * 10 + u32::from(byte - b'0')) % 97,
            b'A'..=b'Z' => (remainder * 100 + u32::from(byte - b'A') + 10) % 97,
            _ => return false,
        };
    }
    remainder == 1
}

/// The number at `number_end` is followed by a word that makes it an amount.
fn is_amount(haystack: &[u8], number_end: usize) -> bool {
    let rest = &haystack[number_end..];
    let word_start = rest.iter().position(|byte| !byte.is_ascii_whitespace()).unwrap_or(rest.len());
    let word: Vec<u8> =
        rest[word_start..].iter().take_while(|byte| byte.is_ascii_alphabetic()).map(u8::to_ascii_lowercase).collect();
    AMOUNT_WORDS.iter().any(|amount| amount.as_bytes() == word.as_slice())
}
