//! Street addresses of the US, the UK, France and Germany, with the postcode and city
//! after them when they are there. A street type or a postcode is the evidence: words
//! that are only ambiguous ("12 Dragon Hill", "Marktplatz 3", "3 place Bellecour") are an
//! address only with a postcode and city after them, while strong ones ("Main Street",
//! "rue", "Hauptstraße") are one alone, as the US street pattern always was.

use regex::bytes::{Regex, RegexSet};

/// The street pattern of the redactor before issue 20, kept whole: the baseline of
/// `npcmem bench pii`, and still the rule for a US or UK street standing alone.
pub(super) const LEGACY_STREET_PATTERN: &str = concat!(
    r"(?i)(?-u:\b)[0-9]{1,5}[a-z]?\s(?:\w+|(?-i:[A-Z]\w*\s[A-Z]\w*))\s",
    r"(?:street|st|avenue|ave|road|rd|drive|dr|lane|ln|boulevard|blvd|court|ct|way|place|pl)",
    r"(?-u:\b)",
);

const UPPER: &str = r"\p{Lu}";
const LOWER: &str = r"\p{Ll}";

const EN_SUFFIXES: &str = concat!(
    "street|st|avenue|ave|road|rd|drive|dr|lane|ln|boulevard|blvd|court|ct|way|place|pl|",
    "terrace|ter|parkway|pkwy|circle|cir|highway|hwy|close|crescent|cres|gardens|gdns|grove|",
    "mews|square|sq|row|walk|hill|park|rise|green|trail|trl|plaza|alley|path|broadway",
);

const US_STATES: &str = concat!(
    "AL|AK|AZ|AR|CA|CO|CT|DE|DC|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|",
    "NH|NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|PR|VI|GU",
);

const FR_STRONG_WAYS: &str = "rue|boulevard|bd|allée|allee|impasse|quai|chemin|faubourg|fbg";
const FR_OTHER_WAYS: &str = concat!(
    "avenue|av\\.|place|pl\\.|cours|square|passage|route|promenade|esplanade|villa|cité|cite|",
    "sentier|voie|rond-point|parvis|montée|ruelle|hameau|mail",
);
const FR_PARTICLES: &str = "de\\s+la|de\\s+l['’]|du|des|de|d['’]|la|le|les|l['’]|aux|au|sur|sous|en|et";

/// German street words that make an address alone ("Lindenweg 4") and those that need
/// a postcode and city after them ("Marktplatz 3, 04109 Leipzig").
const DE_STRONG_SUFFIXES: &str = "straße|strasse|str\\.|weg|gasse|allee|chaussee";
const DE_OTHER_SUFFIXES: &str =
    "platz|ring|damm|ufer|steig|pfad|markt|graben|hof|berg|tor|brücke|kai|stieg|wall|zeile|höhe|feld|garten|park";
const DE_PREPOSITIONS: &str = concat!(
    "Am|An\\s+der|An\\s+den|Auf\\s+der|Auf\\s+dem|Im|In\\s+der|In\\s+den|Unter\\s+den|Zum|Zur|",
    "Hinter\\s+der|Vor\\s+dem|Alte|Alter|Neue|Neuer|Große|Kleine",
);

/// Capitalised city words, e.g. "Salt Lake City", "Stratford-upon-Avon", "Frankfurt am
/// Main", "Aix-en-Provence": each further word after a space or hyphen, maybe after one
/// lower-case particle, so a trailing "in" or "and" is never part of the city.
fn city(upper: &str, lower: &str, particles: &str) -> String {
    format!(r"(?:St\.?\s+)?[{upper}][{lower}]+(?:(?:\s+|-)(?:(?:{particles})(?:\s+|-))?[{upper}][{lower}]+){{0,2}}")
}

pub(super) struct Patterns {
    pub(super) en_street: String,
    pub(super) en_street_with_tail: String,
    pub(super) fr_street: String,
    pub(super) fr_street_with_tail: String,
    pub(super) de_street: String,
    pub(super) de_street_with_tail: String,
    pub(super) us_city_state_zip: String,
    pub(super) uk_town_postcode: String,
    pub(super) tail_after_token: String,
}

pub(super) fn patterns() -> Patterns {
    let en_city = city("A-Z", "a-z", "upon|on|in|under|le|la|de");
    // French mail is often addressed in capitals: "75002 PARIS", "42000 SAINT-ÉTIENNE".
    let eu_city = format!(
        r"(?:{}|[{UPPER}]{{2,}}(?:[ -][{UPPER}]{{2,}}){{0,2}})",
        city(UPPER, LOWER, "am|an|der|im|in|ob|sur|sous|en|lès|les|le|la|de|du|des|d['’]|l['’]")
    );
    let zip = r"[0-9]{5}(?:-[0-9]{4})?(?-u:\b)";
    let uk_postcode = r"[A-Z]{1,2}[0-9][A-Z0-9]?\s?[0-9][A-Z]{2}(?-u:\b)";
    let us_tail = format!(r",?\s+{en_city},?\s+(?:{US_STATES})\s+{zip}");
    let uk_tail = format!(r",?\s+(?:{en_city},?\s+)?{uk_postcode}");
    let eu_tail = format!(r",?\s+(?:[DF]-)?[0-9]{{5}}\s+{eu_city}(?:\s+(?i:cedex)(?:\s+[0-9]{{1,2}})?)?");
    let direction = r"(?:\s+(?:N|S|E|W|NE|NW|SE|SW)(?-u:\b))?";
    let unit = r"(?:,?\s+(?:Apt\.?|Apartment|Suite|Ste\.?|Unit|Flat|\#)\s*[0-9A-Za-z-]{1,6})?";
    let flat = r"(?:(?:Flat|Apartment|Apt\.?|Unit|Suite)\s+[0-9A-Za-z]{1,5},?\s+)?";
    // With a city and postcode after it, any capitalised street name is evidence
    // enough ("1 Infinite Loop, Cupertino, CA 95014"); without, only a street type.
    let en_name_word = r"(?:[A-Z][A-Za-z'’.-]*|[0-9]{1,3}(?:st|nd|rd|th))";

    let fr_word = format!(r"[{UPPER}][{LOWER}]+(?:-(?:[{UPPER}]|[{LOWER}])[{LOWER}]+)*");
    let fr_name = format!(r"(?:(?:{FR_PARTICLES})\s*)?{fr_word}(?:\s+(?:(?:{FR_PARTICLES})\s*)?{fr_word}){{0,3}}");
    let fr_number = r"(?-u:\b)[0-9]{1,4}(?:\s?(?:bis|ter|quater|[BbTt]))?,?";

    let de_word = format!(r"[{UPPER}][{LOWER}]+");
    let de_number = r"[0-9]{1,4}\s?[a-zA-Z]?(?:\s?[-/]\s?[0-9]{1,4}[a-zA-Z]?)?(?-u:\b)";
    let capitalised = |suffixes: &str| {
        let title_case: Vec<String> = suffixes
            .split('|')
            .map(|suffix| {
                let mut characters = suffix.chars();
                characters.next().map(|first| first.to_uppercase().chain(characters).collect()).unwrap_or_default()
            })
            .collect();
        title_case.join("|")
    };
    let de_street = |suffixes: &str| {
        format!(
            r"(?:[{UPPER}][{LOWER}]*(?:{suffixes})|{de_word}(?:-{de_word})*-(?:{title})|{de_word}(?:e|er|es|en)\s+(?:{title}))",
            title = capitalised(suffixes),
        )
    };
    let de_strong = de_street(DE_STRONG_SUFFIXES);
    let de_other = format!(
        r"(?:{}|(?:{DE_PREPOSITIONS})\s+{de_word}(?:\s+{de_word})?)",
        de_street(&format!("{DE_STRONG_SUFFIXES}|{DE_OTHER_SUFFIXES}"))
    );

    Patterns {
        en_street: format!(r"{LEGACY_STREET_PATTERN}(?-i:{direction})"),
        en_street_with_tail: format!(
            r"(?-u:\b){flat}[0-9]{{1,5}}[A-Za-z]?\s+(?:{en_name_word}\s+){{0,4}}(?:(?i:{EN_SUFFIXES})\.?|{en_name_word}){direction}{unit}(?:{us_tail}|{uk_tail})"
        ),
        fr_street: format!(r"{fr_number}\s+(?i:{FR_STRONG_WAYS})\s+{fr_name}(?:{eu_tail})?"),
        fr_street_with_tail: format!(r"{fr_number}\s+(?i:{FR_OTHER_WAYS})\s+{fr_name}{eu_tail}"),
        de_street: format!(r"{de_strong}\s+{de_number}(?:{eu_tail})?"),
        de_street_with_tail: format!(r"{de_other}\s+{de_number}{eu_tail}"),
        us_city_state_zip: format!(r"(?-u:\b){en_city},\s+(?:{US_STATES})\s+{zip}"),
        uk_town_postcode: format!(r"(?-u:\b){en_city},?\s+{uk_postcode}"),
        tail_after_token: format!(r"\[ADDRESS\](?:{us_tail}|{uk_tail}|{eu_tail})"),
    }
}

/// Capitalised words that end a sentence before "OK 10000" or "IN 50000" far more often
/// than they name a US city ("Fine, OK 10000 gold").
const NOT_CITIES: [&str; 14] =
    ["Fine", "Sure", "Deal", "Yes", "Yeah", "Well", "Okay", "Right", "Done", "Great", "Good", "So", "Then", "Now"];

/// Cheap evidence one family of patterns needs, looked for before the patterns run: most
/// text with digits has none, and the patterns, which start on a digit or a capital
/// without any literal to skip ahead to, are the slow part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// None beyond the digit the prefilter saw (the pre-issue-20 street pattern).
    Digit,
    /// A US state and ZIP or a UK postcode.
    UsZipOrUkPostcode,
    /// A French way word.
    FrenchWay,
    /// A German street word before a number, or a preposition that starts a street.
    GermanStreet,
    /// An `[ADDRESS]` token.
    Token,
}

const EVIDENCE: [Evidence; 4] =
    [Evidence::UsZipOrUkPostcode, Evidence::FrenchWay, Evidence::GermanStreet, Evidence::Token];

fn evidence_pattern(evidence: Evidence) -> String {
    match evidence {
        Evidence::Digit => "[0-9]".to_owned(),
        Evidence::UsZipOrUkPostcode => {
            format!(r"(?:{US_STATES})\s+[0-9]{{5}}|[A-Z]{{1,2}}[0-9][A-Z0-9]?\s?[0-9][A-Z]{{2}}")
        }
        Evidence::FrenchWay => format!(r"(?i:{FR_STRONG_WAYS}|{FR_OTHER_WAYS})"),
        Evidence::GermanStreet => {
            let suffixes = format!("{DE_STRONG_SUFFIXES}|{DE_OTHER_SUFFIXES}");
            format!(r"(?i:{suffixes})\s*[0-9]|(?:{DE_PREPOSITIONS})\s")
        }
        Evidence::Token => r"\[ADDRESS\]".to_owned(),
    }
}

#[derive(Debug, Clone)]
pub(super) struct AddressFinder {
    legacy_street: Regex,
    /// Each pattern with the evidence it needs and whether its match must start after a
    /// non-letter (checked in code: the German ones may start with a non-ASCII capital,
    /// where the regex's ASCII word boundary does not apply). The last one is the US
    /// "City, ST ZIP".
    patterns: Vec<(Regex, Evidence, bool)>,
    /// The evidence patterns, in the order of [`EVIDENCE`], looked for in one scan.
    evidence: RegexSet,
}

impl AddressFinder {
    pub(super) fn new(compile: impl Fn(&str) -> Regex) -> Self {
        let patterns = patterns();
        let in_order = [
            (patterns.en_street_with_tail, Evidence::UsZipOrUkPostcode, false),
            (patterns.en_street, Evidence::Digit, false),
            (patterns.fr_street_with_tail, Evidence::FrenchWay, false),
            (patterns.fr_street, Evidence::FrenchWay, false),
            (patterns.de_street_with_tail, Evidence::GermanStreet, true),
            (patterns.de_street, Evidence::GermanStreet, true),
            (patterns.uk_town_postcode, Evidence::UsZipOrUkPostcode, false),
            (patterns.tail_after_token, Evidence::Token, false),
            (patterns.us_city_state_zip, Evidence::UsZipOrUkPostcode, false),
        ];
        AddressFinder {
            legacy_street: compile(LEGACY_STREET_PATTERN),
            patterns: in_order
                .iter()
                .map(|(pattern, evidence, check_start)| (compile(pattern), *evidence, *check_start))
                .collect(),
            evidence: RegexSet::new(EVIDENCE.iter().map(|&evidence| evidence_pattern(evidence)))
                .expect("static PII pattern compiles"),
        }
    }

    pub(super) fn spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let present: Vec<Evidence> =
            self.evidence.matches(haystack).iter().map(|index| EVIDENCE[index]).chain([Evidence::Digit]).collect();
        let mut spans = Vec::new();
        let us_city_state_zip = self.patterns.len() - 1;
        for (index, (regex, evidence, check_start)) in self.patterns.iter().enumerate() {
            if !present.contains(evidence) {
                continue;
            }
            for found in regex.find_iter(haystack) {
                if *check_start && !starts_a_word(haystack, found.start()) {
                    continue;
                }
                if index == us_city_state_zip {
                    let city = found.as_bytes().split(|&byte| byte == b',' || byte == b' ').next().unwrap_or_default();
                    if NOT_CITIES.iter().any(|word| word.as_bytes() == city) {
                        continue;
                    }
                }
                spans.push((found.start(), found.end()));
            }
        }
        super::without_overlaps(spans)
    }

    pub(super) fn legacy_spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        self.legacy_street.find_iter(haystack).map(|found| (found.start(), found.end())).collect()
    }
}

/// The character before `start` is not a letter or digit (UTF-8 aware: a lead byte of a
/// multi-byte character counts as a letter).
fn starts_a_word(haystack: &[u8], start: usize) -> bool {
    let Some(before) = start.checked_sub(1).map(|index| haystack[index]) else {
        return true;
    };
    !(before.is_ascii_alphanumeric() || before >= 0x80 || before == b'_')
}
