//! Parsing and validating the extraction model's reply: find the JSON in whatever the model wrote, then clamp every
//! field into range so nothing malformed reaches the safety filter or storage.
//!
//! Nothing here panics on any input; the one thing it refuses is a reply with no usable
//! JSON at all, which the caller treats as a failed extraction.

use serde_json::{Map, Value};

use crate::extraction::candidate::{
    ExtractedMemory, MAX_CONTENT_CHARS, MAX_EXTRACTED_IMPORTANCE, MAX_MEMORIES_PER_EXTRACTION,
};
use crate::memory::{EmotionalValence, MemoryType, round3};

/// Tags kept per memory; further tags are dropped.
pub const MAX_TAGS: usize = 10;
/// A longer tag is cut to this many chars.
pub const MAX_TAG_CHARS: usize = 40;
/// Seed `_parse_and_validate`: `item.get("importance", 0.5)`.
pub const DEFAULT_IMPORTANCE: f64 = 0.5;
/// Seed `_parse_and_validate`: `item.get("emotional_intensity", 0.0)`.
pub const DEFAULT_EMOTIONAL_INTENSITY: f64 = 0.0;
/// The seed's prompt does not ask for a confidence; what the model says is taken as
/// fairly but not fully reliable.
pub const DEFAULT_LLM_CONFIDENCE: f64 = 0.9;

/// How many `[` / `{` positions are tried when JSON is embedded in prose. A reply is at
/// most ~500 tokens (`EXTRACTION_MAX_OUTPUT_TOKENS`), so this is generous, and it keeps
/// the scan linear in the input length on adversarial text.
const MAX_EMBEDDED_CANDIDATES: usize = 64;
const CODE_FENCE: &str = "```";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// The reply has no `[` or `{` and is not JSON either: the model wrote prose.
    #[error("model reply contains no JSON")]
    NoJson,
    /// Something looked like JSON but did not parse.
    #[error("model reply has invalid JSON: {0}")]
    InvalidJson(String),
    /// JSON parsed but is neither an array of memories nor an object with `memories`.
    #[error("model reply has the wrong shape: {0}")]
    WrongShape(String),
}

impl ParseError {
    /// A stable, machine-readable code for logs, metrics and the job's error column.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::NoJson => "no_json",
            ParseError::InvalidJson(_) => "invalid_json",
            ParseError::WrongShape(_) => "wrong_shape",
        }
    }
}

/// Parses the model's reply into at most [`MAX_MEMORIES_PER_EXTRACTION`] memories.
///
/// Accepted shapes: a JSON array of memory objects, an object `{"memories": [...]}`, or
/// a single memory object (one with `content`), either as the whole reply, inside a
/// ```` ``` ```` / ```` ```json ```` fence, or embedded in prose (the first outermost
/// array or object that has one of those shapes). `Ok(vec![])` is a valid answer: the
/// model found nothing worth remembering.
///
/// Each item is validated on its own, and an invalid item is skipped, never the reply:
/// non-objects and items without a non-blank string `content` are dropped; the first
/// three valid items are kept. Content has control chars and whitespace runs turned
/// into single spaces, is trimmed and cut to [`MAX_CONTENT_CHARS`]. Numbers may be JSON
/// numbers or numeric strings; they are clamped into [0, 1] (a missing, non-numeric or
/// NaN value takes the default) and rounded to 3 decimals, and importance is capped at
/// [`MAX_EXTRACTED_IMPORTANCE`]. Unknown valences become neutral, unknown memory types
/// episodic (both matched case-insensitively). Tags: see [`normalize_tag`]; at most
/// [`MAX_TAGS`], without duplicates.
pub fn parse_extraction(raw: &str) -> Result<Vec<ExtractedMemory>, ParseError> {
    let items = locate_memory_items(raw)?;
    let memories: Vec<ExtractedMemory> =
        items.iter().filter_map(memory_from_item).take(MAX_MEMORIES_PER_EXTRACTION).collect();
    debug_assert!(memories.len() <= MAX_MEMORIES_PER_EXTRACTION);
    Ok(memories)
}

/// A tag as stored: control chars and whitespace runs become one `_`, lowercased, cut to
/// [`MAX_TAG_CHARS`] chars. `None` when nothing is left.
pub fn normalize_tag(raw: &str) -> Option<String> {
    let without_controls: String =
        raw.chars().map(|character| if character.is_control() { ' ' } else { character }).collect();
    let joined = without_controls.split_whitespace().collect::<Vec<_>>().join("_").to_lowercase();
    let tag = cut_chars(&joined, MAX_TAG_CHARS);
    if tag.is_empty() { None } else { Some(tag.to_owned()) }
}

/// Memory content as stored: control chars and whitespace runs become one space,
/// trimmed, cut to [`MAX_CONTENT_CHARS`] chars. `None` when nothing is left.
pub fn normalize_content(raw: &str) -> Option<String> {
    let without_controls: String =
        raw.chars().map(|character| if character.is_control() { ' ' } else { character }).collect();
    let collapsed = without_controls.split_whitespace().collect::<Vec<_>>().join(" ");
    let content = cut_chars(&collapsed, MAX_CONTENT_CHARS).trim_end();
    if content.is_empty() { None } else { Some(content.to_owned()) }
}

/// The first `max_chars` chars of `text`, cut on a char boundary, without an ellipsis.
pub(crate) fn cut_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((byte_index, _)) => &text[..byte_index],
        None => text,
    }
}

/// How sure we are that a JSON value is the model's answer, which decides how strict
/// the shape check is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// The whole reply, or the whole of a code fence: any array counts.
    Whole,
    /// Found inside prose: an array counts only if it is empty or holds an object, so
    /// `"I found [2] memories: [...]"` skips the `[2]`.
    Embedded,
}

fn locate_memory_items(raw: &str) -> Result<Vec<Value>, ParseError> {
    let mut failures = Failures::default();

    let whole_regions = std::iter::once(raw.trim()).chain(fenced_blocks(raw));
    for region in whole_regions {
        match serde_json::from_str::<Value>(region) {
            Ok(value) => match memory_items(value, Placement::Whole) {
                Ok(items) => return Ok(items),
                Err(wrong_shape) => failures.record(wrong_shape),
            },
            // Prose fails here too; only text that looks like JSON is an InvalidJson.
            Err(error) if region.starts_with(['[', '{']) => failures.record(ParseError::InvalidJson(error.to_string())),
            Err(_) => {}
        }
    }

    let mut search_from = 0;
    for _ in 0..MAX_EMBEDDED_CANDIDATES {
        let Some(offset) = raw[search_from..].find(['[', '{']) else { break };
        let start = search_from + offset;
        let mut values = serde_json::Deserializer::from_str(&raw[start..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let consumed = values.byte_offset();
                match memory_items(value, Placement::Embedded) {
                    Ok(items) => return Ok(items),
                    Err(wrong_shape) => failures.record(wrong_shape),
                }
                // Skip the whole value: what is nested in it is not outermost.
                search_from = start + consumed.max(1);
            }
            Some(Err(error)) => {
                failures.record(ParseError::InvalidJson(error.to_string()));
                search_from = start + 1;
            }
            None => break,
        }
        debug_assert!(raw.is_char_boundary(search_from), "brackets are ASCII and values end on a boundary");
    }

    Err(failures.into_error())
}

/// The most telling failure seen: JSON of the wrong shape beats broken JSON beats none.
#[derive(Default)]
struct Failures {
    wrong_shape: Option<ParseError>,
    invalid_json: Option<ParseError>,
}

impl Failures {
    fn record(&mut self, error: ParseError) {
        let slot = match error {
            ParseError::WrongShape(_) => &mut self.wrong_shape,
            ParseError::InvalidJson(_) => &mut self.invalid_json,
            ParseError::NoJson => return,
        };
        slot.get_or_insert(error);
    }

    fn into_error(self) -> ParseError {
        self.wrong_shape.or(self.invalid_json).unwrap_or(ParseError::NoJson)
    }
}

/// The trimmed contents of each ```` ``` ```` fence; the opening fence's language tag
/// (`json`) is skipped, and an unclosed fence runs to the end of the text.
fn fenced_blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let open = rest.find(CODE_FENCE)?;
        let after_fence = &rest[open + CODE_FENCE.len()..];
        // The language tag, if any; the block is trimmed below, so a one-line fence
        // (```json [...]```) works like a multi-line one.
        let body = after_fence.trim_start_matches(|character: char| character.is_ascii_alphanumeric());
        let (block, after_block) = match body.find(CODE_FENCE) {
            Some(close) => (&body[..close], &body[close + CODE_FENCE.len()..]),
            None => (body, ""),
        };
        rest = after_block;
        Some(block.trim())
    })
}

fn memory_items(value: Value, placement: Placement) -> Result<Vec<Value>, ParseError> {
    match value {
        Value::Array(items) => {
            let looks_like_memories = items.is_empty() || items.iter().any(Value::is_object);
            if placement == Placement::Embedded && !looks_like_memories {
                return Err(ParseError::WrongShape("an array without memory objects".to_owned()));
            }
            Ok(items)
        }
        Value::Object(mut fields) => match fields.remove("memories") {
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(ParseError::WrongShape(format!("`memories` is {}", describe(&other)))),
            None if fields.contains_key("content") => Ok(vec![Value::Object(fields)]),
            None => Err(ParseError::WrongShape("an object without `memories`".to_owned())),
        },
        other => Err(ParseError::WrongShape(format!("expected an array of memories, got {}", describe(&other)))),
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn memory_from_item(item: &Value) -> Option<ExtractedMemory> {
    let fields = item.as_object()?;
    let content = normalize_content(fields.get("content")?.as_str()?)?;

    let importance = unit_number(fields, "importance", DEFAULT_IMPORTANCE).min(MAX_EXTRACTED_IMPORTANCE);
    let memory = ExtractedMemory {
        memory_type: enum_field(fields, "memory_type").unwrap_or(MemoryType::Episodic),
        content,
        tags: tags(fields.get("tags")),
        importance: round3(importance),
        confidence: round3(unit_number(fields, "confidence", DEFAULT_LLM_CONFIDENCE)),
        emotional_valence: enum_field(fields, "emotional_valence").unwrap_or(EmotionalValence::Neutral),
        emotional_intensity: round3(unit_number(fields, "emotional_intensity", DEFAULT_EMOTIONAL_INTENSITY)),
        actor: enum_field(fields, "actor"),
        target: enum_field(fields, "target"),
        // A model's free text has no placeholders to fill for another holder.
        statement: None,
    };
    debug_assert!((0.0..=MAX_EXTRACTED_IMPORTANCE).contains(&memory.importance));
    Some(memory)
}

/// A number or numeric string clamped into [0, 1]; `default` when missing, of another
/// type, unparsable or NaN.
fn unit_number(fields: &Map<String, Value>, key: &str, default: f64) -> f64 {
    let number = match fields.get(key) {
        Some(Value::Number(number)) => number.as_f64(),
        Some(Value::String(text)) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(number) if !number.is_nan() => number.clamp(0.0, 1.0),
        _ => default,
    }
}

fn enum_field<T: std::str::FromStr>(fields: &Map<String, Value>, key: &str) -> Option<T> {
    fields.get(key)?.as_str()?.trim().to_ascii_lowercase().parse().ok()
}

fn tags(value: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(items)) = value else { return Vec::new() };
    let mut tags: Vec<String> = Vec::new();
    for tag in items.iter().filter_map(Value::as_str).filter_map(normalize_tag) {
        if tags.len() == MAX_TAGS {
            break;
        }
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parse(raw: &str) -> Vec<ExtractedMemory> {
        match parse_extraction(raw) {
            Ok(memories) => memories,
            Err(error) => panic!("{raw:?} should parse, got {error}"),
        }
    }

    fn parse_one(item: Value) -> ExtractedMemory {
        let memories = parse(&json!([item]).to_string());
        assert_eq!(memories.len(), 1, "{memories:?}");
        memories.into_iter().next().expect("one memory")
    }

    /// Every invariant an `Ok` result promises; `None` when all hold.
    fn invariant_violation(memories: &[ExtractedMemory]) -> Option<String> {
        if memories.len() > MAX_MEMORIES_PER_EXTRACTION {
            return Some(format!("{} memories", memories.len()));
        }
        let in_unit_and_rounded = |value: f64| (0.0..=1.0).contains(&value) && round3(value) == value;
        for memory in memories {
            let content = &memory.content;
            let content_ok = !content.is_empty()
                && content.trim() == content
                && content.chars().count() <= MAX_CONTENT_CHARS
                && !content.chars().any(char::is_control);
            let numbers_ok = in_unit_and_rounded(memory.importance)
                && memory.importance <= MAX_EXTRACTED_IMPORTANCE
                && in_unit_and_rounded(memory.confidence)
                && in_unit_and_rounded(memory.emotional_intensity);
            let mut unique_tags = memory.tags.clone();
            unique_tags.sort();
            unique_tags.dedup();
            let tags_ok = memory.tags.len() <= MAX_TAGS
                && unique_tags.len() == memory.tags.len()
                && memory.tags.iter().all(|tag| {
                    !tag.is_empty()
                        && tag.chars().count() <= MAX_TAG_CHARS
                        && *tag == tag.to_lowercase()
                        && !tag.chars().any(|character| character.is_whitespace() || character.is_control())
                });
            if !(content_ok && numbers_ok && tags_ok) {
                return Some(format!("{memory:?}"));
            }
        }
        None
    }

    const SWORD_SALE: &str = r#"[
      {
        "content": "Aria purchased a steel sword for 50 gold",
        "importance": 0.4,
        "emotional_valence": "neutral",
        "emotional_intensity": 0.1,
        "tags": ["trade", "sword", "customer"],
        "memory_type": "episodic"
      }
    ]"#;

    fn sword_sale_memory() -> ExtractedMemory {
        ExtractedMemory {
            memory_type: MemoryType::Episodic,
            content: "Aria purchased a steel sword for 50 gold".into(),
            tags: vec!["trade".into(), "sword".into(), "customer".into()],
            importance: 0.4,
            confidence: DEFAULT_LLM_CONFIDENCE,
            emotional_valence: EmotionalValence::Neutral,
            emotional_intensity: 0.1,
            actor: None,
            target: None,
            statement: None,
        }
    }

    #[test]
    fn valid_json_array_parses_every_field() {
        assert_eq!(parse(SWORD_SALE), vec![sword_sale_memory()]);
        let semantic = parse_one(json!({
            "content": "Aria is a regular customer", "importance": 0.6, "confidence": 0.75,
            "emotional_valence": "positive", "emotional_intensity": 0.3, "memory_type": "semantic", "tags": []
        }));
        assert_eq!(semantic.memory_type, MemoryType::Semantic);
        assert_eq!(semantic.emotional_valence, EmotionalValence::Positive);
        assert_eq!((semantic.importance, semantic.confidence, semantic.emotional_intensity), (0.6, 0.75, 0.3));
    }

    #[test]
    fn empty_array_means_nothing_to_remember() {
        assert_eq!(parse("[]"), vec![]);
        assert_eq!(parse("  \n[ ]\n"), vec![]);
        assert_eq!(parse(r#"{"memories": []}"#), vec![]);
        assert_eq!(parse("Nothing memorable happened.\n\n[]"), vec![]);
    }

    #[test]
    fn fenced_json_parses() {
        for raw in [
            format!("```json\n{SWORD_SALE}\n```"),
            format!("```\n{SWORD_SALE}\n```"),
            format!("Here you go:\n```JSON\n{SWORD_SALE}\n```\nLet me know if you need more."),
            format!("```json {SWORD_SALE}```"),
            format!("```json\n{SWORD_SALE}"),
            format!("I considered [citation needed] carefully.\n```json\n{SWORD_SALE}\n```"),
        ] {
            assert_eq!(parse(&raw), vec![sword_sale_memory()], "{raw}");
        }
    }

    #[test]
    fn a_one_line_fence_is_read_whole() {
        // The `{not: json}` after the fence is never reached.
        let raw = "Sure: ```json [{\"content\": \"x\"}]``` and {not: json}\n";
        let contents: Vec<String> = parse(raw).into_iter().map(|memory| memory.content).collect();
        assert_eq!(contents, ["x"]);
    }

    #[test]
    fn object_with_memories_parses() {
        let raw = format!(r#"{{"memories": {SWORD_SALE}, "notes": "ignored"}}"#);
        assert_eq!(parse(&raw), vec![sword_sale_memory()]);
    }

    #[test]
    fn a_single_memory_object_parses() {
        let raw = r#"{"content": "Aria purchased a steel sword for 50 gold", "importance": 0.4,
            "emotional_intensity": 0.1, "tags": ["trade", "sword", "customer"]}"#;
        assert_eq!(parse(raw), vec![sword_sale_memory()]);
    }

    #[test]
    fn prose_around_json_is_ignored() {
        for raw in [
            format!("Sure! Here are the memories:\n{SWORD_SALE}\nHope this helps."),
            format!("I found [2] candidates, kept one: {SWORD_SALE}"),
            format!("Result {{\"memories\": {SWORD_SALE}}} done"),
            format!("{{broken json {SWORD_SALE}"),
            format!("{SWORD_SALE} and also [1, 2]"),
        ] {
            assert_eq!(parse(&raw), vec![sword_sale_memory()], "{raw}");
        }
    }

    #[test]
    fn more_than_three_memories_keep_the_first_three() {
        let items: Vec<Value> = (1..=5).map(|index| json!({"content": format!("memory {index}")})).collect();
        let memories = parse(&Value::Array(items).to_string());
        let contents: Vec<&str> = memories.iter().map(|memory| memory.content.as_str()).collect();
        assert_eq!(contents, ["memory 1", "memory 2", "memory 3"]);
    }

    #[test]
    fn skipped_items_do_not_count_towards_the_cap() {
        let raw = r#"[42, {"content": ""}, {"content": "a"}, "text", {"content": "b"}, null, {"content": "c"}, {"content": "d"}]"#;
        let contents: Vec<String> = parse(raw).into_iter().map(|memory| memory.content).collect();
        assert_eq!(contents, ["a", "b", "c"]);
    }

    #[test]
    fn out_of_range_numbers_are_clamped_and_rounded() {
        let clamped_high = parse_one(json!({
            "content": "x", "importance": 7.5, "confidence": 3, "emotional_intensity": 1e300
        }));
        assert_eq!(
            (clamped_high.importance, clamped_high.confidence, clamped_high.emotional_intensity),
            (MAX_EXTRACTED_IMPORTANCE, 1.0, 1.0)
        );
        let clamped_low = parse_one(json!({
            "content": "x", "importance": -2, "confidence": -0.0001, "emotional_intensity": -1e9
        }));
        assert_eq!((clamped_low.importance, clamped_low.confidence, clamped_low.emotional_intensity), (0.0, 0.0, 0.0));
        assert!(clamped_low.confidence.is_sign_positive());
        let rounded = parse_one(json!({
            "content": "x", "importance": 0.12345, "confidence": 0.3 - 0.1, "emotional_intensity": 0.6666
        }));
        assert_eq!((rounded.importance, rounded.confidence, rounded.emotional_intensity), (0.123, 0.2, 0.667));
    }

    #[test]
    fn importance_is_capped_for_extracted_memories() {
        assert_eq!(parse_one(json!({"content": "x", "importance": 0.9})).importance, 0.7);
        assert_eq!(parse_one(json!({"content": "x", "importance": 0.7})).importance, 0.7);
        assert_eq!(parse_one(json!({"content": "x", "importance": 0.69})).importance, 0.69);
    }

    #[test]
    fn numeric_strings_parse_and_garbage_takes_the_default() {
        let from_strings = parse_one(json!({
            "content": "x", "importance": " 0.3 ", "confidence": "0.55", "emotional_intensity": "1e-1"
        }));
        assert_eq!(
            (from_strings.importance, from_strings.confidence, from_strings.emotional_intensity),
            (0.3, 0.55, 0.1)
        );
        let defaults = parse_one(json!({
            "content": "x", "importance": "NaN", "confidence": "very", "emotional_intensity": true
        }));
        assert_eq!(
            (defaults.importance, defaults.confidence, defaults.emotional_intensity),
            (DEFAULT_IMPORTANCE, DEFAULT_LLM_CONFIDENCE, DEFAULT_EMOTIONAL_INTENSITY)
        );
        let missing = parse_one(json!({"content": "x", "importance": null, "confidence": [0.2]}));
        assert_eq!((missing.importance, missing.confidence, missing.emotional_intensity), (0.5, 0.9, 0.0));
        assert_eq!(parse_one(json!({"content": "x", "importance": "inf"})).importance, 0.7);
    }

    #[test]
    fn unknown_enums_fall_back() {
        let unknown = parse_one(json!({"content": "x", "emotional_valence": "furious", "memory_type": "dream"}));
        assert_eq!(unknown.emotional_valence, EmotionalValence::Neutral);
        assert_eq!(unknown.memory_type, MemoryType::Episodic);
        let wrong_types = parse_one(json!({"content": "x", "emotional_valence": 1, "memory_type": ["semantic"]}));
        assert_eq!(wrong_types.emotional_valence, EmotionalValence::Neutral);
        assert_eq!(wrong_types.memory_type, MemoryType::Episodic);
        let other_case =
            parse_one(json!({"content": "x", "emotional_valence": " Negative", "memory_type": "PROCEDURAL"}));
        assert_eq!(other_case.emotional_valence, EmotionalValence::Negative);
        assert_eq!(other_case.memory_type, MemoryType::Procedural);
    }

    #[test]
    fn empty_or_missing_content_skips_the_item() {
        let raw = r#"[{"content": ""}, {"content": "  \n\t "}, {"importance": 0.9}, {"content": 42},
            {"content": null}, {"content": "\u0000"}, {"content": " kept "}]"#;
        let contents: Vec<String> = parse(raw).into_iter().map(|memory| memory.content).collect();
        assert_eq!(contents, ["kept"]);
    }

    #[test]
    fn content_is_cleaned_and_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_CONTENT_CHARS + 20);
        let memory = parse_one(json!({"content": long}));
        assert_eq!(memory.content, "é".repeat(MAX_CONTENT_CHARS));
        let cut_before_space = format!("{} tail", "a".repeat(MAX_CONTENT_CHARS - 1));
        assert_eq!(parse_one(json!({"content": cut_before_space})).content, "a".repeat(MAX_CONTENT_CHARS - 1));
        let messy = parse_one(json!({"content": "  Aria\n\nbought\u{0}a\tsword  "}));
        assert_eq!(messy.content, "Aria bought a sword");
    }

    #[test]
    fn tags_are_normalised() {
        let many: Vec<String> = (0..15).map(|index| format!("tag{index}")).collect();
        let memory = parse_one(json!({
            "content": "x",
            "tags": [" Combat ", "combat", "trade deal", 7, null, ["nested"], "", "HELPFUL", "Ünïcode Tag",
                     "x".repeat(60), many[0], many[1], many[2], many[3], many[4], many[5], many[6]]
        }));
        assert_eq!(
            memory.tags,
            [
                "combat",
                "trade_deal",
                "helpful",
                "ünïcode_tag",
                "x".repeat(MAX_TAG_CHARS).as_str(),
                "tag0",
                "tag1",
                "tag2",
                "tag3",
                "tag4"
            ]
        );
        assert_eq!(parse_one(json!({"content": "x", "tags": "combat"})).tags, Vec::<String>::new());
        assert_eq!(parse_one(json!({"content": "x"})).tags, Vec::<String>::new());
    }

    #[test]
    fn prose_without_json_is_an_error() {
        for raw in ["", "   ", "The player bought a sword.", "I cannot help with that request."] {
            assert_eq!(parse_extraction(raw), Err(ParseError::NoJson), "{raw:?}");
        }
    }

    #[test]
    fn broken_json_is_an_error() {
        for raw in ["[{\"content\": \"unterminated", "{\"memories\": [", "```json\n[{]\n```"] {
            let error = parse_extraction(raw).expect_err(raw);
            assert_eq!(error.code(), "invalid_json", "{raw:?}: {error}");
        }
    }

    #[test]
    fn json_of_the_wrong_shape_is_an_error() {
        for raw in
            ["42", "\"a string\"", "null", "true", r#"{"memory": []}"#, r#"{"memories": "none"}"#, "Found [1, 2] only"]
        {
            let error = parse_extraction(raw).expect_err(raw);
            assert_eq!(error.code(), "wrong_shape", "{raw:?}: {error}");
        }
    }

    #[test]
    fn whole_reply_arrays_of_non_objects_yield_nothing() {
        assert_eq!(parse("[1, \"two\", null]"), vec![]);
    }

    #[test]
    fn error_codes_are_stable() {
        assert_eq!(ParseError::NoJson.code(), "no_json");
        assert_eq!(ParseError::InvalidJson("x".into()).code(), "invalid_json");
        assert_eq!(ParseError::WrongShape("x".into()).code(), "wrong_shape");
        assert_eq!(
            ParseError::WrongShape("an object".into()).to_string(),
            "model reply has the wrong shape: an object"
        );
    }

    #[test]
    fn deeply_nested_input_is_refused_without_overflowing() {
        let deep = "[".repeat(100_000);
        assert_eq!(parse_extraction(&deep).expect_err("too deep").code(), "invalid_json");
        let many_candidates = "{".repeat(10_000) + SWORD_SALE;
        assert!(parse_extraction(&many_candidates).is_err());
    }

    #[test]
    fn normalize_helpers_follow_the_rules() {
        assert_eq!(normalize_tag("  Night  Watch "), Some("night_watch".to_owned()));
        assert_eq!(normalize_tag(" \t"), None);
        assert_eq!(normalize_content(" a \n b "), Some("a b".to_owned()));
        assert_eq!(normalize_content("\u{7}"), None);
        assert_eq!(cut_chars("héllo", 2), "hé");
        assert_eq!(cut_chars("hé", 5), "hé");
    }

    /// JSON values shaped like model replies, good and bad.
    fn reply_like_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1e6f64..1e6).prop_map(|number| json!(number)),
            (-2.0f64..2.0).prop_map(|number| json!(number)),
            any::<i64>().prop_map(|number| json!(number)),
            prop_oneof![
                Just("positive"),
                Just("NEGATIVE"),
                Just("episodic"),
                Just("semantic"),
                Just("0.5"),
                Just("NaN"),
                Just("-inf"),
                Just(" "),
                Just(""),
            ]
            .prop_map(|text| json!(text)),
            any::<String>().prop_map(Value::String),
        ];
        let key = prop_oneof![
            Just("content"),
            Just("importance"),
            Just("confidence"),
            Just("emotional_intensity"),
            Just("emotional_valence"),
            Just("memory_type"),
            Just("tags"),
            Just("memories"),
            Just("other"),
        ];
        leaf.prop_recursive(4, 48, 12, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
                prop::collection::btree_map(key.clone().prop_map(str::to_owned), inner, 0..9)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    fn wrapped(json_text: String, wrapping: u8, prose: &str) -> String {
        match wrapping % 4 {
            0 => json_text,
            1 => format!("```json\n{json_text}\n```"),
            2 => format!("{prose}{json_text}{prose}"),
            _ => format!("{prose}\n```\n{json_text}\n```\n{prose}"),
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(raw in any::<String>()) {
            if let Ok(memories) = parse_extraction(&raw) {
                prop_assert!(invariant_violation(&memories).is_none(), "{:?}", invariant_violation(&memories));
            }
        }

        #[test]
        fn reply_like_json_satisfies_the_invariants(
            value in reply_like_json(),
            wrapping in any::<u8>(),
            prose in "[a-z \\[\\]{}:,\"]{0,20}",
        ) {
            let raw = wrapped(value.to_string(), wrapping, &prose);
            if let Ok(memories) = parse_extraction(&raw) {
                prop_assert!(invariant_violation(&memories).is_none(), "{:?}", invariant_violation(&memories));
            }
        }

        #[test]
        fn every_valid_item_of_a_plain_array_is_kept_up_to_the_cap(
            contents in prop::collection::vec("[a-z]{1,10}", 0..8),
        ) {
            let items: Vec<Value> = contents.iter().map(|content| json!({"content": content})).collect();
            let memories = parse_extraction(&Value::Array(items).to_string());
            let expected: Vec<&String> = contents.iter().take(MAX_MEMORIES_PER_EXTRACTION).collect();
            let parsed: Vec<String> = memories.expect("a plain array parses").into_iter().map(|memory| memory.content).collect();
            prop_assert_eq!(parsed.iter().collect::<Vec<_>>(), expected);
        }
    }
}
