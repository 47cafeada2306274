//! Real names a player gives out of character. Character names are game data, so a name
//! is replaced only where the text says it is the real one: "my real name is …", or a
//! self-introduction next to an out-of-character marker ("(ooc) I'm …", "… irl").

use regex::bytes::Regex;

/// Any of these words (case-insensitive) must be in the text for a name to be looked
/// for; most chat lines have none of them, so the name patterns rarely run.
const CUE_PATTERN: &str = r"(?i)name|irl|ooc|real life|out of character|\(\(|off[- ]?game| rl ";

const UPPER: &str = r"\p{Lu}";
const LOWER: &str = r"\p{Ll}";

/// "my real name is …", "my actual name's …", "my name irl is …".
const REAL_NAME_CUE: &str = concat!(
    r"(?i)(?-u:\b)my\s+(?:(?:real|actual|legal|irl|rl|real[- ]life|real[- ]world|offline|out[- ]of[- ]game)\s+name",
    r"|name\s+(?:irl|in\s+real\s+life|in\s+rl|outside\s+(?:of\s+)?the\s+game|ooc|off[- ]?game))",
    r"\s*(?:is\s+actually|is\s+really|is|['’]s|=|:|-)?\s*",
);

/// Out-of-character markers.
const OOC_MARKER: &str = concat!(
    r"(?:\(\(|(?-u:\b)(?:ooc|irl|in\s+real\s+life|in\s+rl|out\s+of\s+character|off[- ]?game",
    r"|outside\s+(?:of\s+)?the\s+game)(?-u:\b))",
);

/// Ways of giving one's own name.
const INTRODUCTION: &str =
    r"(?-u:\b)(?:my\s+name\s+is|my\s+name['’]s|my\s+name\s*:|name['’]s|i['’]m|i\s+am|im|call\s+me)";

/// Words that follow "I'm" capitalised without being a name ("irl I'm American", "ooc:
/// I'm AFK"), or that follow "my real name is" instead of one ("… is not important").
const NOT_NAMES: [&str; 77] = [
    "is",
    "was",
    "not",
    "afk",
    "brb",
    "back",
    "just",
    "sorry",
    "here",
    "busy",
    "tired",
    "going",
    "gonna",
    "also",
    "still",
    "really",
    "actually",
    "fine",
    "good",
    "ok",
    "okay",
    "off",
    "out",
    "on",
    "in",
    "at",
    "from",
    "only",
    "very",
    "the",
    "a",
    "an",
    "so",
    "too",
    "kinda",
    "like",
    "married",
    "single",
    "bored",
    "hungry",
    "late",
    "done",
    "home",
    "working",
    "sure",
    "glad",
    "happy",
    "sick",
    "nobody",
    "nothing",
    "secret",
    "private",
    "unknown",
    "irrelevant",
    "none",
    "hidden",
    "american",
    "british",
    "english",
    "german",
    "french",
    "canadian",
    "australian",
    "irish",
    "scottish",
    "dutch",
    "spanish",
    "italian",
    "polish",
    "swedish",
    "russian",
    "brazilian",
    "mexican",
    "and",
    "but",
    "lol",
    "btw",
];

#[derive(Debug, Clone)]
pub(super) struct NameFinder {
    cue: Regex,
    /// Each pattern has a `name` group: the only part replaced.
    patterns: Vec<Regex>,
}

impl NameFinder {
    pub(super) fn new(compile: impl Fn(&str) -> Regex) -> Self {
        let word = format!(
            r"[{UPPER}](?:[{LOWER}]*[{UPPER}][{LOWER}]+|['’][{UPPER}][{LOWER}]+|[{LOWER}]+)(?:-[{UPPER}][{LOWER}]+)?"
        );
        let capitalised =
            format!(r"(?-i:{word}(?:\s+(?:(?:van|von|de|da|di|del|der|den|du|le|la|bin|al|ter)\s+)?{word}){{0,2}})");
        // After an explicit "my real name is", a name typed in lower case is still one.
        let lower_word = format!(r"[{LOWER}][{LOWER}'’-]*[{LOWER}]");
        let any_case = format!(r"(?:{capitalised}|(?-i:{lower_word}(?:\s+{lower_word}){{0,2}}))");
        let patterns = [
            format!(r"{REAL_NAME_CUE}(?P<name>{any_case})"),
            format!(r"(?i){OOC_MARKER}[^.!?\n]{{0,40}}?{INTRODUCTION}\s+(?P<name>{capitalised})"),
            format!(
                r"(?i){INTRODUCTION}\s+(?P<name>{capitalised})\s*,?\s+(?:irl|in\s+real\s+life|in\s+rl|ooc|outside\s+(?:of\s+)?the\s+game|off[- ]?game|out\s+of\s+character)(?-u:\b)"
            ),
        ];
        NameFinder { cue: compile(CUE_PATTERN), patterns: patterns.iter().map(|pattern| compile(pattern)).collect() }
    }

    pub(super) fn may_contain(&self, haystack: &[u8]) -> bool {
        self.cue.is_match(haystack)
    }

    pub(super) fn spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        for regex in &self.patterns {
            for captures in regex.captures_iter(haystack) {
                if let Some(name) = captures.name("name")
                    && let Some(end) = name_end(haystack, name.start(), name.end())
                {
                    spans.push((name.start(), end));
                }
            }
        }
        super::without_overlaps(spans)
    }
}

/// Where the name ends: before the first word that is no name ("Sarah Btw" → "Sarah");
/// `None` when the first word is none.
fn name_end(haystack: &[u8], start: usize, end: usize) -> Option<usize> {
    let mut name_end = None;
    let mut word_start = start;
    for (offset, &byte) in haystack[start..end].iter().enumerate().chain(std::iter::once((end - start, &b' '))) {
        if byte.is_ascii_whitespace() {
            if word_start < start + offset {
                let word = String::from_utf8_lossy(&haystack[word_start..start + offset]).to_lowercase();
                if NOT_NAMES.contains(&word.as_str()) {
                    break;
                }
                name_end = Some(start + offset);
            }
            word_start = start + offset + 1;
        }
    }
    name_end
}
