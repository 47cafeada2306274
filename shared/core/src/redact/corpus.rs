//! Labelled PII cases, generated from a seed, for the redaction tests and `npcmem bench
//! pii`: chat lines holding one phone number, IBAN, card or bank account, street
//! address (US, UK, France, Germany) or real name given out of character, each with the
//! text expected after redaction, and ordinary game text that must come through as it
//! is. The values are built by each format's own rules (allocated number ranges, Luhn
//! and mod-97 check digits, postcodes of the city), not by asking the redactor.

use std::collections::BTreeMap;

use crate::context::MONTHS;

/// A small deterministic generator (SplitMix64): the same seed gives the same cases on
/// every machine, and no crate is needed for it.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn digits(&mut self, count: usize) -> String {
        (0..count).map(|_| char::from(b'0' + self.below(10) as u8)).collect()
    }
}

/// What a generated case holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Phone,
    Iban,
    CardOrBank,
    AddressUs,
    AddressUk,
    AddressFr,
    AddressDe,
    OocName,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Phone,
        Kind::Iban,
        Kind::CardOrBank,
        Kind::AddressUs,
        Kind::AddressUk,
        Kind::AddressFr,
        Kind::AddressDe,
        Kind::OocName,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Phone => "phone",
            Kind::Iban => "iban",
            Kind::CardOrBank => "card/bank",
            Kind::AddressUs => "address US",
            Kind::AddressUk => "address UK",
            Kind::AddressFr => "address FR",
            Kind::AddressDe => "address DE",
            Kind::OocName => "ooc name",
        }
    }

    /// The tokens this kind's values are replaced with.
    pub fn tokens(self) -> &'static [&'static str] {
        match self {
            Kind::Phone => &[super::PHONE_TOKEN],
            Kind::Iban => &[super::IBAN_TOKEN],
            Kind::CardOrBank => &[super::CARD_TOKEN, super::ACCOUNT_TOKEN],
            Kind::AddressUs | Kind::AddressUk | Kind::AddressFr | Kind::AddressDe => &[super::ADDRESS_TOKEN],
            Kind::OocName => &[super::NAME_TOKEN],
        }
    }
}

/// One chat line: `kind` is `None` for ordinary game text, whose `expected` is `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub kind: Option<Kind>,
    pub text: String,
    pub expected: String,
}

/// `count` cases of `kind`.
pub fn cases(kind: Kind, seed: u64, count: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ (kind as u64 + 1).wrapping_mul(0x1000_0000_01B3));
    (0..count)
        .map(|_| {
            let (template, value, token) = match kind {
                Kind::Phone => (pick_template(&mut rng, PHONE_TEMPLATES), phone(&mut rng), super::PHONE_TOKEN),
                Kind::Iban => (pick_template(&mut rng, IBAN_TEMPLATES), iban(&mut rng), super::IBAN_TOKEN),
                Kind::CardOrBank => return card_or_bank(&mut rng),
                Kind::AddressUs => return us_address(&mut rng),
                Kind::AddressUk => {
                    (pick_template(&mut rng, ADDRESS_TEMPLATES), uk_address(&mut rng), super::ADDRESS_TOKEN)
                }
                Kind::AddressFr => {
                    (pick_template(&mut rng, FR_ADDRESS_TEMPLATES), fr_address(&mut rng), super::ADDRESS_TOKEN)
                }
                Kind::AddressDe => {
                    (pick_template(&mut rng, DE_ADDRESS_TEMPLATES), de_address(&mut rng), super::ADDRESS_TOKEN)
                }
                Kind::OocName => return ooc_name(&mut rng),
            };
            fill(kind, template, &value, token)
        })
        .collect()
}

/// `count` lines of ordinary game text: prices, quantities, dates, times, rooms,
/// levels, coordinates, ids, character names (also introduced in character).
pub fn game_text(seed: u64, count: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed ^ 0x6A09_E667_F3BC_C908);
    (0..count)
        .map(|_| {
            let text = game_line(&mut rng);
            Case { kind: None, expected: text.clone(), text }
        })
        .collect()
}

fn pick_template(rng: &mut Rng, templates: &[&'static str]) -> &'static str {
    templates[rng.below(templates.len())]
}

fn fill(kind: Kind, template: &str, value: &str, token: &str) -> Case {
    Case { kind: Some(kind), text: template.replace("{}", value), expected: template.replace("{}", token) }
}

/// Per kind: `true_positives` are expected tokens of cases redacted exactly as expected.
/// A case redacted in any other way scores its expected tokens as misses and every
/// token produced in it as a false alarm of the kind owning that token, so a
/// half-replaced value or a token spilling over its neighbours counts against both
/// recall and precision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Score {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
}

impl Score {
    pub fn precision(&self) -> Option<f64> {
        let found = self.true_positives + self.false_positives;
        (found > 0).then(|| self.true_positives as f64 / found as f64)
    }

    pub fn recall(&self) -> Option<f64> {
        let expected = self.true_positives + self.false_negatives;
        (expected > 0).then(|| self.true_positives as f64 / expected as f64)
    }
}

/// Scores a redactor (`redact`) on `cases`, per kind. A false alarm of the address
/// token outside the address cases counts against every address kind.
pub fn score(cases: &[Case], redact: impl Fn(&str) -> String) -> BTreeMap<Kind, Score> {
    let mut scores: BTreeMap<Kind, Score> = Kind::ALL.iter().map(|&kind| (kind, Score::default())).collect();
    for case in cases {
        let redacted = redact(&case.text);
        let right = redacted == case.expected;
        for kind in Kind::ALL {
            let already = count_tokens(&case.text, kind);
            // A case holds at least one value of its kind, also where the token is
            // already in its text ("[ADDRESS], Springfield, IL 62704").
            let expected = if case.kind == Some(kind) {
                count_tokens(&case.expected, kind).saturating_sub(already).max(1)
            } else {
                0
            };
            let produced = count_tokens(&redacted, kind).saturating_sub(already);
            let score = scores.get_mut(&kind).expect("every kind is scored");
            if right {
                if case.kind == Some(kind) {
                    score.true_positives += expected;
                }
                continue;
            }
            if case.kind == Some(kind) {
                score.false_negatives += expected;
            }
            let charged = case.kind == Some(kind) || case.kind.is_none_or(|other| other.tokens() != kind.tokens());
            if charged {
                score.false_positives += produced;
            }
        }
    }
    scores
}

fn count_tokens(text: &str, kind: Kind) -> usize {
    kind.tokens().iter().map(|token| text.matches(token).count()).sum()
}

// --- phone numbers -------------------------------------------------------------------

const PHONE_TEMPLATES: &[&str] = &[
    "call me on {}",
    "my number is {}.",
    "{} is my cell",
    "ring me at {} after 6pm",
    "text {} if you get lost",
    "whatsapp: {}",
    "you can reach me at {}, ask for Tom",
    "my mum's landline is {} lol",
    "(ooc) hit me up on {}",
    "Phone {} anytime",
    "call {} at 10:30 tomorrow",
    "my number's {} and I'm in room 214",
    "meine Nummer ist {}",
    "appelle-moi au {} stp",
];

/// Area codes in service.
const US_AREA_CODES: &[&str] = &[
    "201", "202", "206", "212", "213", "214", "215", "303", "305", "310", "312", "313", "404", "415", "503", "512",
    "602", "617", "702", "713", "718", "801", "804", "808", "818", "860", "904", "917", "949", "972",
];

fn phone(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => us_phone(rng),
        1 => uk_phone(rng),
        2 => fr_phone(rng),
        _ => de_phone(rng),
    }
}

fn us_phone(rng: &mut Rng) -> String {
    let area = rng.pick(US_AREA_CODES);
    // Exchanges start with 2–9 and are never N11.
    let exchange = loop {
        let exchange = format!("{}{}", rng.between(2, 9), rng.digits(2));
        if &exchange[1..] != "11" {
            break exchange;
        }
    };
    let line = rng.digits(4);
    match rng.below(9) {
        0 => format!("({area}) {exchange}-{line}"),
        1 => format!("{area}-{exchange}-{line}"),
        2 => format!("{area}.{exchange}.{line}"),
        3 => format!("{area} {exchange} {line}"),
        4 => format!("{area}{exchange}{line}"),
        5 => format!("+1 {area} {exchange} {line}"),
        6 => format!("+1-{area}-{exchange}-{line}"),
        7 => format!("1-{area}-{exchange}-{line}"),
        _ => format!("+1 ({area}) {exchange}-{line}"),
    }
}

fn uk_phone(rng: &mut Rng) -> String {
    // Mobile 07[4-5,7-9]… or a geographic number of a big city.
    let (prefix, subscriber) = if rng.chance(60) {
        (format!("7{}{}", rng.pick(&["4", "5", "7", "8", "9"]), rng.digits(2)), rng.digits(6))
    } else {
        match rng.below(4) {
            0 => (format!("20{}", rng.pick(&["3", "7", "8"])), rng.digits(7)),
            // Only the allocated blocks: 0121 8–9 and 0113 6–9 are not in service.
            1 => ("161".to_owned(), format!("{}{}", rng.between(2, 9), rng.digits(6))),
            2 => ("121".to_owned(), format!("{}{}", rng.between(2, 7), rng.digits(6))),
            _ => ("113".to_owned(), format!("{}{}", rng.between(2, 5), rng.digits(6))),
        }
    };
    let national = format!("{prefix}{subscriber}");
    let grouped = if national.starts_with("20") {
        format!("{} {} {}", &national[..2], &national[2..6], &national[6..])
    } else if national.starts_with('7') {
        format!("{} {}", &national[..4], &national[4..])
    } else {
        format!("{} {} {}", &national[..3], &national[3..6], &national[6..])
    };
    match rng.below(7) {
        0 | 1 => format!("0{grouped}"),
        2 => format!("0{national}"),
        3 => format!("+44 {grouped}"),
        4 => format!("+44 (0){grouped}"),
        5 => format!("0044 {grouped}"),
        _ => format!("+44{national}"),
    }
}

fn fr_phone(rng: &mut Rng) -> String {
    // 01–05 geographic, 06 and 07[3-9] mobile.
    let start = match rng.below(7) {
        0..=2 => format!("6{}", rng.pick(&["0", "1", "2", "4", "5", "6", "7", "8"])),
        3 => format!("7{}", rng.between(3, 9)),
        _ => format!("{}{}", rng.between(1, 5), rng.between(1, 9)),
    };
    let national = format!("{start}{}", rng.digits(7));
    let pairs = |separator: &str| {
        let mut text = format!("0{}", &national[..1]);
        for pair in national.as_bytes()[1..].chunks(2) {
            text.push_str(separator);
            text.push_str(std::str::from_utf8(pair).unwrap_or_default());
        }
        text
    };
    match rng.below(8) {
        0 | 1 => pairs(" "),
        2 => pairs("."),
        3 => pairs("-"),
        4 => format!("0{national}"),
        5 => format!("+33 {}", &pairs(" ")[1..]),
        6 => format!("+33 (0){}", &pairs(" ")[1..]),
        _ => format!("0033 {}", &pairs(" ")[1..]),
    }
}

fn de_phone(rng: &mut Rng) -> String {
    let (area, subscriber) = if rng.chance(50) {
        let prefix = rng.pick(&["151", "152", "157", "159", "160", "162", "170", "171", "172", "175", "176", "179"]);
        let length = if prefix.starts_with("15") || *prefix == "176" { 8 } else { 7 };
        (prefix.to_string(), rng.digits(length))
    } else {
        let area = rng.pick(&["30", "40", "89", "69", "221", "211", "711", "341"]);
        let length = if area.len() == 2 { rng.between(7, 8) } else { rng.between(6, 7) };
        (area.to_string(), format!("{}{}", rng.between(2, 9), rng.digits(length - 1)))
    };
    match rng.below(9) {
        0 | 1 => format!("0{area} {subscriber}"),
        2 => format!("0{area}/{subscriber}"),
        3 => format!("0{area}-{subscriber}"),
        4 => format!("(0{area}) {subscriber}"),
        5 => format!("+49 {area} {subscriber}"),
        6 => format!("+49 (0){area} {subscriber}"),
        7 => format!("0049 {area} {subscriber}"),
        _ => format!("+49{area}{subscriber}"),
    }
}

// --- IBANs ---------------------------------------------------------------------------

const IBAN_TEMPLATES: &[&str] = &[
    "my IBAN is {}",
    "send it to {} please",
    "IBAN: {}",
    "wire the money to {}, thanks",
    "{} is my bank",
    "transfer to {} (Sparkasse)",
    "überweis an {} bitte",
    "virement sur {} merci",
];

/// (country, bank part, digits after it): the layouts of some SEPA countries.
fn iban(rng: &mut Rng) -> String {
    let upper = |rng: &mut Rng, count: usize| -> String {
        (0..count).map(|_| char::from(b'A' + rng.below(26) as u8)).collect()
    };
    let (country, bban) = match rng.below(12) {
        0 => ("GB", format!("{}{}", rng.pick(&["NWBK", "BARC", "LOYD", "HBUK", "MIDL"]), rng.digits(14))),
        1 => ("DE", rng.digits(18)),
        2 => ("FR", rng.digits(23)),
        3 => ("ES", rng.digits(20)),
        4 => ("IT", format!("{}{}", upper(rng, 1), rng.digits(22))),
        5 => ("NL", format!("{}{}", rng.pick(&["ABNA", "INGB", "RABO", "TRIO"]), rng.digits(10))),
        6 => ("BE", rng.digits(12)),
        7 => ("CH", rng.digits(17)),
        8 => ("AT", rng.digits(16)),
        9 => ("IE", format!("{}{}", rng.pick(&["AIBK", "BOFI"]), rng.digits(14))),
        10 => ("PL", rng.digits(24)),
        _ => ("PT", rng.digits(21)),
    };
    let check = 98 - mod97(&format!("{bban}{country}00"));
    let iban = format!("{country}{check:02}{bban}");
    match rng.below(5) {
        0 | 1 => grouped(&iban, 4, " "),
        2 => iban,
        3 => grouped(&iban, 4, " ").to_lowercase(),
        _ => iban.to_lowercase(),
    }
}

fn mod97(text: &str) -> u32 {
    text.bytes().fold(0u32, |remainder, byte| match byte {
        b'0'..=b'9' => (remainder * 10 + u32::from(byte - b'0')) % 97,
        _ => (remainder * 100 + u32::from(byte.to_ascii_uppercase() - b'A') + 10) % 97,
    })
}

fn grouped(text: &str, size: usize, separator: &str) -> String {
    text.as_bytes()
        .chunks(size)
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
        .collect::<Vec<_>>()
        .join(separator)
}

// --- cards and bank accounts ---------------------------------------------------------

fn card_or_bank(rng: &mut Rng) -> Case {
    if rng.chance(50) {
        let template = pick_template(
            rng,
            &[
                "my card is {}",
                "card number {} exp 12/27",
                "pay with {}, cvv is on the back",
                "use {} for the subscription",
                "visa {} thanks",
                "here: {}",
            ],
        );
        return fill(Kind::CardOrBank, template, &card(rng), super::CARD_TOKEN);
    }
    let account = |rng: &mut Rng, low: usize, high: usize| {
        let length = rng.between(low, high);
        rng.digits(length)
    };
    let sort_code = format!("{}-{}-{}", rng.digits(2), rng.digits(2), rng.digits(2));
    let (text, expected) = match rng.below(7) {
        0 => {
            let uk_account = rng.digits(8);
            (
                format!("sort code {sort_code}, account {uk_account}"),
                "sort code [ACCOUNT], account [ACCOUNT]".to_owned(),
            )
        }
        1 => (format!("my bank is {sort_code} {}", rng.digits(8)), "my bank is [ACCOUNT]".to_owned()),
        2 => {
            (format!("account number {} at Chase", account(rng, 8, 12)), "account number [ACCOUNT] at Chase".to_owned())
        }
        3 => (
            format!("routing number {}, account number {}", rng.digits(9), account(rng, 8, 17)),
            "routing number [ACCOUNT], account number [ACCOUNT]".to_owned(),
        ),
        4 => (format!("meine Kontonummer ist {}", account(rng, 8, 10)), "meine Kontonummer ist [ACCOUNT]".to_owned()),
        5 => (format!("numéro de compte {}", account(rng, 11, 11)), "numéro de compte [ACCOUNT]".to_owned()),
        _ => (format!("acct # {} pls", account(rng, 6, 12)), "acct # [ACCOUNT] pls".to_owned()),
    };
    Case { kind: Some(Kind::CardOrBank), text, expected }
}

/// A Luhn-valid number of a real issuer prefix, written as people write it.
fn card(rng: &mut Rng) -> String {
    let (prefix, length) = match rng.below(4) {
        0 => ("4".to_owned(), 16),
        1 => (format!("5{}", rng.between(1, 5)), 16),
        2 => (rng.pick(&["34", "37"]).to_string(), 15),
        _ => ("6011".to_owned(), 16),
    };
    let mut digits = format!("{prefix}{}", rng.digits(length - prefix.len() - 1));
    let check = (0..10).find(|digit| super::luhn_valid(&format!("{digits}{digit}"))).unwrap_or(0);
    digits.push_str(&check.to_string());
    match (rng.below(3), length) {
        (0, _) => digits,
        (1, 15) => format!("{} {} {}", &digits[..4], &digits[4..10], &digits[10..]),
        (1, _) => grouped(&digits, 4, " "),
        _ => grouped(&digits, 4, "-"),
    }
}

// --- street addresses ----------------------------------------------------------------

const ADDRESS_TEMPLATES: &[&str] = &[
    "I live at {}",
    "send it to {} please",
    "my address is {}.",
    "we moved to {} last year",
    "ship to {}",
    "{} is my place lol",
    "come by {} sometime",
];

const US_CITIES: &[(&str, &str, &str)] = &[
    ("Springfield", "IL", "627"),
    ("Washington", "DC", "200"),
    ("New York", "NY", "100"),
    ("Los Angeles", "CA", "900"),
    ("Chicago", "IL", "606"),
    ("Houston", "TX", "770"),
    ("Phoenix", "AZ", "850"),
    ("Philadelphia", "PA", "191"),
    ("San Diego", "CA", "921"),
    ("Austin", "TX", "787"),
    ("Portland", "OR", "972"),
    ("Seattle", "WA", "981"),
    ("Boston", "MA", "021"),
    ("Denver", "CO", "802"),
    ("Salt Lake City", "UT", "841"),
    ("Miami", "FL", "331"),
    ("Atlanta", "GA", "303"),
    ("Columbus", "OH", "432"),
    ("Nashville", "TN", "372"),
    ("Madison", "WI", "537"),
];

const US_STREETS: &[&str] = &[
    "Main",
    "Oak",
    "Maple",
    "Pine",
    "Cedar",
    "Elm",
    "Washington",
    "Lake",
    "Hill",
    "Park",
    "Sunset",
    "Pennsylvania",
    "Madison",
    "Jefferson",
    "Lincoln",
    "Highland",
    "Church",
    "Market",
    "Spring",
    "Franklin",
    "Chestnut",
    "Walnut",
    "Broad",
    "Old Mill",
    "Martin Luther King Jr",
    "5th",
    "42nd",
    "Mulholland",
    "Evergreen",
    "Cherry Hill",
];

const US_SUFFIXES: &[&str] = &[
    "Street",
    "St",
    "Avenue",
    "Ave",
    "Road",
    "Rd",
    "Boulevard",
    "Blvd",
    "Drive",
    "Dr",
    "Lane",
    "Ln",
    "Court",
    "Ct",
    "Way",
    "Place",
    "Pl",
    "Terrace",
    "Parkway",
    "Pkwy",
    "Circle",
    "Highway",
];

fn us_address(rng: &mut Rng) -> Case {
    let (city, state, zip_prefix) = *rng.pick(US_CITIES);
    let mut zip = format!("{zip_prefix}{}", rng.digits(2));
    if rng.chance(15) {
        zip = format!("{zip}-{}", rng.digits(4));
    }
    let template = pick_template(rng, ADDRESS_TEMPLATES);
    // The case: the street already redacted, its city and ZIP left behind.
    if rng.chance(10) {
        let text = template.replace("{}", &format!("[ADDRESS], {city}, {state} {zip}"));
        return Case { kind: Some(Kind::AddressUs), text, expected: template.replace("{}", super::ADDRESS_TOKEN) };
    }
    let number = rng.between(1, 99_999);
    let street = rng.pick(US_STREETS);
    let suffix = rng.pick(US_SUFFIXES);
    let direction =
        if rng.chance(15) { format!(" {}", rng.pick(&["NW", "NE", "SW", "SE", "N", "S"])) } else { String::new() };
    let unit = match rng.below(8) {
        0 => format!(", Apt {}{}", rng.between(1, 30), rng.pick(&["", "A", "B"])),
        1 => format!(" Suite {}", rng.between(100, 999)),
        2 => format!(" #{}", rng.between(1, 99)),
        _ => String::new(),
    };
    let address = format!("{number} {street} {suffix}{direction}{unit}, {city}, {state} {zip}");
    fill(Kind::AddressUs, template, &address, super::ADDRESS_TOKEN)
}

const UK_TOWNS: &[(&str, &[&str])] = &[
    ("London", &["NW1", "SW1A", "E1", "N1", "SE1", "W1D", "EC1A", "WC2N", "SW19", "E14"]),
    ("Manchester", &["M1", "M4", "M13", "M20"]),
    ("Birmingham", &["B1", "B15", "B29"]),
    ("Leeds", &["LS1", "LS6"]),
    ("Oxford", &["OX1", "OX4"]),
    ("Cambridge", &["CB1", "CB2"]),
    ("Bristol", &["BS1", "BS8"]),
    ("Edinburgh", &["EH1", "EH8"]),
    ("Glasgow", &["G1", "G12"]),
    ("Cardiff", &["CF10", "CF24"]),
    ("Liverpool", &["L1", "L8"]),
    ("Newcastle upon Tyne", &["NE1", "NE6"]),
    ("Brighton", &["BN1", "BN2"]),
    ("York", &["YO1", "YO10"]),
];

const UK_STREETS: &[&str] = &[
    "Baker",
    "High",
    "Church",
    "Station",
    "Victoria",
    "Green",
    "Manor",
    "Park",
    "Queens",
    "Kings",
    "Old Mill",
    "St John's",
    "Mill",
    "School",
    "Albert",
    "York",
    "Windsor",
    "Chapel",
    "Grange",
    "Orchard",
];

const UK_SUFFIXES: &[&str] = &[
    "Street", "Road", "Lane", "Avenue", "Close", "Crescent", "Drive", "Gardens", "Grove", "Place", "Square", "Terrace",
    "Way", "Mews", "Hill", "Walk",
];

fn uk_address(rng: &mut Rng) -> String {
    let (town, districts) = *rng.pick(UK_TOWNS);
    // Inward codes never use C, I, K, M, O or V.
    let letters = b"ABDEFGHJLNPQRSTUWXYZ";
    let inward = format!("{}{}{}", rng.below(10), char::from(*rng.pick(letters)), char::from(*rng.pick(letters)));
    let postcode = format!("{} {inward}", rng.pick(districts));
    let number = format!("{}{}", rng.between(1, 250), if rng.chance(10) { "B" } else { "" });
    let street = format!("{} {}", rng.pick(UK_STREETS), rng.pick(UK_SUFFIXES));
    let flat = if rng.chance(15) { format!("Flat {}, ", rng.between(1, 20)) } else { String::new() };
    let separator = if rng.chance(80) { ", " } else { " " };
    format!("{flat}{number} {street}{separator}{town} {postcode}")
}

const FR_ADDRESS_TEMPLATES: &[&str] = &[
    "j'habite au {}",
    "mon adresse : {}",
    "I live at {}",
    "envoie-le au {} stp",
    "my flat is at {}.",
    "rdv chez moi, {}",
];

const FR_CITIES: &[(&str, &str)] = &[
    ("Paris", "750"),
    ("Lyon", "6900"),
    ("Marseille", "130"),
    ("Toulouse", "31000"),
    ("Nice", "06000"),
    ("Nantes", "44000"),
    ("Strasbourg", "67000"),
    ("Montpellier", "34000"),
    ("Bordeaux", "33000"),
    ("Lille", "59000"),
    ("Rennes", "35000"),
    ("Reims", "51100"),
    ("Saint-Étienne", "42000"),
    ("Aix-en-Provence", "13100"),
    ("Le Havre", "76600"),
    ("Clermont-Ferrand", "63000"),
];

const FR_WAYS: &[&str] =
    &["rue", "rue", "rue", "avenue", "boulevard", "place", "allée", "impasse", "chemin", "quai", "cours"];

const FR_NAMES: &[&str] = &[
    "de la Paix",
    "Victor Hugo",
    "de la République",
    "du Général de Gaulle",
    "des Lilas",
    "Jean Jaurès",
    "Saint-Honoré",
    "de l'Église",
    "des Champs-Élysées",
    "Pasteur",
    "de la Gare",
    "du Moulin",
    "Bellecour",
    "Gambetta",
    "Voltaire",
    "de Verdun",
    "Émile Zola",
    "des Écoles",
    "du Château",
    "Sainte-Catherine",
];

fn fr_address(rng: &mut Rng) -> String {
    let (city, code) = *rng.pick(FR_CITIES);
    let postcode = match code.len() {
        3 => format!("{code}{:02}", rng.between(1, 20)),
        4 => format!("{code}{}", rng.between(1, 9)),
        _ => code.to_owned(),
    };
    let city = if rng.chance(15) { city.to_uppercase() } else { city.to_owned() };
    let number = format!("{}{}", rng.between(1, 180), if rng.chance(10) { " bis" } else { "" });
    let way = rng.pick(FR_WAYS);
    let way = if rng.chance(20) { capitalise(way) } else { way.to_string() };
    let comma = if rng.chance(15) { "," } else { "" };
    let separator = if rng.chance(80) { ", " } else { " " };
    format!("{number}{comma} {way} {}{separator}{postcode} {city}", rng.pick(FR_NAMES))
}

fn capitalise(word: &str) -> String {
    let mut characters = word.chars();
    characters.next().map(|first| first.to_uppercase().chain(characters).collect()).unwrap_or_default()
}

const DE_ADDRESS_TEMPLATES: &[&str] = &[
    "ich wohne in der {}",
    "meine Adresse ist {}",
    "I live at {}",
    "schick es an {} bitte",
    "my address: {}",
    "Lieferadresse {}",
];

const DE_CITIES: &[(&str, usize, usize)] = &[
    ("Berlin", 10115, 14199),
    ("München", 80331, 81929),
    ("Hamburg", 20095, 22769),
    ("Köln", 50667, 51149),
    ("Frankfurt am Main", 60311, 60599),
    ("Stuttgart", 70173, 70629),
    ("Düsseldorf", 40210, 40629),
    ("Leipzig", 4103, 4357),
    ("Dresden", 1067, 1326),
    ("Hannover", 30159, 30669),
    ("Nürnberg", 90402, 90491),
    ("Bremen", 28195, 28779),
    ("Essen", 45127, 45359),
    ("Freiburg im Breisgau", 79098, 79117),
];

const DE_STREETS: &[&str] = &[
    "Hauptstraße",
    "Bahnhofstraße",
    "Schillerstraße",
    "Goethestraße",
    "Gartenstraße",
    "Dorfstraße",
    "Lindenweg",
    "Birkenweg",
    "Am Markt",
    "Kirchgasse",
    "Berliner Straße",
    "Münchner Str.",
    "Karl-Marx-Allee",
    "Unter den Linden",
    "Kurfürstendamm",
    "Marktplatz",
    "Schlossallee",
    "Friedrichstraße",
    "Konrad-Adenauer-Straße",
    "Hauptstr.",
    "Am Bahnhof",
    "Zur Mühle",
    "Mühlenweg",
    "Beethovenstraße",
    "Rosenstraße",
    "Kaiserring",
    "Ölmühlenweg",
];

fn de_address(rng: &mut Rng) -> String {
    let (city, low, high) = *rng.pick(DE_CITIES);
    let postcode = format!("{:05}", rng.between(low, high));
    let number = format!("{}{}", rng.between(1, 220), if rng.chance(15) { rng.pick(&["a", "b"]) } else { &"" });
    let separator = if rng.chance(80) { ", " } else { " " };
    let country = if rng.chance(5) { "D-" } else { "" };
    format!("{} {number}{separator}{country}{postcode} {city}", rng.pick(DE_STREETS))
}

// --- real names given out of character -----------------------------------------------

const FIRST_NAMES: &[&str] = &[
    "John",
    "Sarah",
    "Mohammed",
    "Priya",
    "Wei",
    "Olga",
    "José",
    "Zoë",
    "Siobhan",
    "Chloé",
    "Jürgen",
    "Aoife",
    "Kwame",
    "Yuki",
    "Mateo",
    "Fatima",
    "Liam",
    "Emma",
    "Noah",
    "Olivia",
    "Lucas",
    "Mia",
    "Ahmed",
    "Anna",
    "Pierre",
    "Marie",
    "Hans",
    "Greta",
    "Dmitri",
    "Ingrid",
    "Tomás",
    "Łukasz",
    "Ana-Maria",
    "Jean-Luc",
    "DeShawn",
    "Keiko",
    "Raj",
    "Sven",
];

const LAST_NAMES: &[&str] = &[
    "Smith",
    "Connor",
    "O'Brien",
    "McDonald",
    "Müller",
    "Schmidt",
    "Dubois",
    "García",
    "Nguyen",
    "Kowalski",
    "Patel",
    "Kim",
    "Johnson",
    "Rossi",
    "van Dijk",
    "de Vries",
    "Okafor",
    "Larsen",
    "Novak",
    "Fernández",
    "Lefèvre",
    "Wójcik",
    "Hughes",
    "Brown",
    "Tanaka",
    "Silva",
    "Dupont",
    "Becker",
    "Murphy",
    "Chen",
];

const NAME_TEMPLATES: &[&str] = &[
    "(ooc) my real name is {}",
    "ooc: my name is {}",
    "irl I'm {}",
    "my actual name is {}",
    "my real name's {}, nice to meet you",
    "lol irl my name is {}",
    "OOC - I'm {} btw",
    "in real life I'm {}, I work in IT",
    "I'm {} irl",
    "my name is {} in real life",
    "((my real name is {}))",
    "my irl name is {}",
    "btw my legal name is {}",
    "[ooc] call me {}",
    "out of character: I am {}.",
];

fn ooc_name(rng: &mut Rng) -> Case {
    let first = rng.pick(FIRST_NAMES);
    let name = match rng.below(10) {
        0..=2 => first.to_string(),
        3 => format!("{first} {} {}", rng.pick(FIRST_NAMES), rng.pick(LAST_NAMES)),
        _ => format!("{first} {}", rng.pick(LAST_NAMES)),
    };
    // Typed in lower case after an explicit "my real name is".
    if rng.chance(10) {
        let template = "my real name is {} lol";
        return fill(Kind::OocName, template, &name.to_lowercase(), super::NAME_TOKEN);
    }
    fill(Kind::OocName, pick_template(rng, NAME_TEMPLATES), &name, super::NAME_TOKEN)
}

// --- ordinary game text --------------------------------------------------------------

const CHARACTERS: &[&str] = &[
    "Aldric",
    "Brom",
    "Thorin",
    "Elara",
    "Seraphina",
    "Garrick",
    "Lyra",
    "Kael",
    "Morwen",
    "Ysolde",
    "Fenwick",
    "Grimbold",
    "John Smith",
    "Sarah",
    "Old Tom",
    "Mira Stormwind",
    "Sir Cedric",
    "Jürgen the Tall",
];

const PLACES: &[&str] = &[
    "Ironforge",
    "Stormwind",
    "Riverwood",
    "Whiterun",
    "Eldoria",
    "Blackmoor",
    "Highgarden",
    "Saint-Lune",
    "Mühlental",
    "Kingsbridge",
];

const ITEMS: &[&str] = &["sword", "shield", "health potion", "longbow", "iron ore", "map", "lantern", "ruby ring"];

fn ordinal(number: usize) -> String {
    let suffix = match (number % 10, number % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{number}{suffix}")
}

fn thousands(number: usize) -> String {
    let digits = number.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

fn uuid(rng: &mut Rng) -> String {
    let hex: String = (0..32).map(|_| char::from(b"0123456789abcdef"[rng.below(16)])).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

fn game_line(rng: &mut Rng) -> String {
    let character = rng.pick(CHARACTERS);
    let place = rng.pick(PLACES);
    let item = rng.pick(ITEMS);
    match rng.below(25) {
        0 => format!("I'll give you {} gold for the {item}.", rng.between(1, 5000)),
        1 => format!("That'll be {} coins, friend.", thousands(rng.between(1000, 2_000_000))),
        2 => format!("Meet me in room {} at {}:{:02}.", rng.between(1, 999), rng.between(0, 23), rng.between(0, 59)),
        3 => format!(
            "The festival starts on {:02}/{:02}/{}.",
            rng.between(1, 28),
            rng.between(1, 12),
            rng.between(1990, 2030)
        ),
        4 => format!(
            "It happened on the {} of {}, {}.",
            ordinal(rng.between(1, 31)),
            rng.pick(&MONTHS),
            rng.between(900, 2026)
        ),
        5 => format!("{character} reached level {} today!", rng.between(1, 99)),
        6 => format!("The portal is at coordinates {}, {}.", rng.between(0, 500), rng.between(0, 500)),
        7 => format!("Quest {} is complete.", uuid(rng)),
        8 => format!("My name is {character}, smith of {place}."),
        9 => format!("I'm {character} and I run the tavern in {place}."),
        10 => format!("Buy {} x {item} for {} gold each.", rng.between(2, 50), rng.between(1, 300)),
        11 => {
            format!("The {place} garrison has {} soldiers and {} horses.", rng.between(10, 20000), rng.between(1, 900))
        }
        12 => format!(
            "HP {}/{}, mana {}/{}.",
            rng.between(1, 999),
            rng.between(1000, 9999),
            rng.between(1, 500),
            rng.between(500, 999)
        ),
        13 => format!("In the year {} the walls of {place} fell.", rng.between(100, 3000)),
        14 => format!("I killed {} orcs on the road to {place}.", rng.between(2, 300)),
        15 => {
            format!("Roll {}d{}+{} for damage.", rng.between(1, 8), rng.pick(&[4, 6, 8, 10, 12, 20]), rng.between(1, 9))
        }
        16 => format!("The vault of {place} holds {} gold.", rng.between(1_000_000, 99_999_999)),
        17 => format!(
            "Take the {} door on the left, then {} steps north.",
            ordinal(rng.between(1, 12)),
            rng.between(2, 40)
        ),
        18 => format!(
            "Wave {} of {} arrives at {:02}:{:02}:{:02}.",
            rng.between(1, 9),
            rng.between(10, 20),
            rng.between(0, 23),
            rng.between(0, 59),
            rng.between(0, 59)
        ),
        19 => format!(
            "{character} wins {} to {} in the arena, round {}.",
            rng.between(0, 30),
            rng.between(0, 30),
            rng.between(1, 12)
        ),
        20 => format!("My real name? Around here they call me {character}."),
        21 => format!(
            "Patch {}.{}.{} nerfed the {item} by {}%.",
            rng.between(1, 9),
            rng.between(0, 20),
            rng.between(0, 9),
            rng.between(1, 50)
        ),
        22 => format!(
            "Gate {}, {place}: {} guards on duty since {}:{:02}.",
            rng.between(1, 12),
            rng.between(2, 40),
            rng.between(0, 23),
            rng.between(0, 59)
        ),
        23 => format!(
            "Autosave {}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}+00:00 restored.",
            rng.between(1990, 2030),
            rng.between(1, 12),
            rng.between(1, 28),
            rng.between(0, 23),
            rng.between(0, 59),
            rng.between(0, 59),
            rng.between(0, 999_999_999)
        ),
        _ => format!(
            "{character} of {place} bought {} arrows and {} bread on the {} of {}.",
            rng.between(10, 999),
            rng.between(1, 20),
            ordinal(rng.between(1, 28)),
            rng.pick(&MONTHS)
        ),
    }
}
