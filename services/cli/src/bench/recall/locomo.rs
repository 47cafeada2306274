//! Reads LoCoMo files (Maharana et al., "Evaluating Very Long-Term Conversational Memory
//! of LLM Agents", ACL 2024): real multi-session chats between two people over months,
//! questions written by people who read them, each with the turns that hold its answer.
//!
//! One file is one conversation: `speaker_a`, `speaker_b`, `session_N` (a list of turns
//! `{"speaker","dia_id","text"}`, with an optional `blip_caption` describing a photo the
//! speaker shared) and `session_N_date_time` (`"1:56 pm on 8 May, 2023"`) for N = 1, 2, …,
//! and `qa` (`{"question","answer","evidence":["D<N>:<i>", …],"category"}`). Every other
//! key (the data set's own summaries and observations) is ignored: the benchmark sees only
//! what was said. Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5
//! adversarial (unanswerable, left out here).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use serde_json::Value;

/// A question's category, as the data set numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    MultiHop,
    Temporal,
    OpenDomain,
    SingleHop,
}

impl Category {
    pub const ALL: [Category; 4] = [Category::MultiHop, Category::Temporal, Category::OpenDomain, Category::SingleHop];

    /// The data set's number; None for 5 (adversarial) and anything else.
    fn from_number(number: i64) -> Option<Self> {
        match number {
            1 => Some(Self::MultiHop),
            2 => Some(Self::Temporal),
            3 => Some(Self::OpenDomain),
            4 => Some(Self::SingleHop),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::MultiHop => "multi-hop",
            Self::Temporal => "temporal",
            Self::OpenDomain => "open-domain",
            Self::SingleHop => "single-hop",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The file's name, for messages.
    pub name: String,
    pub speaker_a: String,
    pub speaker_b: String,
    pub sessions: Vec<Session>,
    pub questions: Vec<Question>,
    /// Evidence ids of kept questions that name no turn of the conversation (left out of
    /// their question's evidence).
    pub unknown_evidence: Vec<String>,
    /// Questions of category 5 or an unknown category, left out.
    pub skipped_questions: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// N of `session_N`.
    pub number: u32,
    pub at: DateTime<Utc>,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub dia_id: String,
    pub speaker: String,
    /// What was said, with a shared photo's caption as part of it.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub question: String,
    pub answer: String,
    pub category: Category,
    /// (session index, turn index) of each evidence turn.
    pub evidence: Vec<(usize, usize)>,
}

impl Conversation {
    pub fn turn(&self, (session, turn): (usize, usize)) -> &Turn {
        &self.sessions[session].turns[turn]
    }

    pub fn turn_count(&self) -> usize {
        self.sessions.iter().map(|session| session.turns.len()).sum()
    }
}

/// A file that is not LoCoMo-shaped: which file, which field, what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FormatError {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.field, self.message)
    }
}

impl std::error::Error for FormatError {}

/// Reads one LoCoMo file.
pub fn read(path: &Path) -> anyhow::Result<Conversation> {
    let bytes = std::fs::read(path).map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?;
    Ok(parse(&path.display().to_string(), &bytes)?)
}

/// Parses one LoCoMo file's bytes; `name` names it in errors.
pub fn parse(name: &str, bytes: &[u8]) -> Result<Conversation, FormatError> {
    let error = |field: &str, message: String| FormatError { file: name.to_owned(), field: field.to_owned(), message };
    let root: Value = serde_json::from_slice(bytes).map_err(|e| error("(file)", format!("not JSON: {e}")))?;
    // The published file wraps each conversation in {"conversation": {...}, "qa": [...]};
    // the per-conversation files keep everything at the top.
    let conversation = root.get("conversation").unwrap_or(&root);
    let prefix = if root.get("conversation").is_some() { "conversation." } else { "" };
    let object = conversation.as_object().ok_or_else(|| error("(file)", "must be a JSON object".into()))?;
    let text_field = |key: &str| -> Result<String, FormatError> {
        match object.get(key) {
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
            Some(other) => {
                Err(error(&format!("{prefix}{key}"), format!("must be a non-empty string, got {}", kind(other))))
            }
            None => Err(error(&format!("{prefix}{key}"), "missing".into())),
        }
    };
    let speaker_a = text_field("speaker_a")?;
    let speaker_b = text_field("speaker_b")?;

    let mut numbers: Vec<u32> = object
        .keys()
        .filter_map(|key| key.strip_prefix("session_"))
        .filter_map(|rest| rest.parse::<u32>().ok())
        .collect();
    numbers.sort_unstable();
    if numbers.is_empty() {
        return Err(error(&format!("{prefix}session_1"), "missing: the file has no sessions".into()));
    }
    let mut sessions = Vec::with_capacity(numbers.len());
    let mut positions: HashMap<String, (usize, usize)> = HashMap::new();
    for number in numbers {
        let field = format!("{prefix}session_{number}");
        let turns = object[&format!("session_{number}")].as_array().ok_or_else(|| {
            error(&field, format!("must be a list of turns, got {}", kind(&object[&format!("session_{number}")])))
        })?;
        let date_field = format!("{field}_date_time");
        let at = match object.get(&format!("session_{number}_date_time")) {
            Some(Value::String(text)) => parse_date_time(text)
                .ok_or_else(|| error(&date_field, format!("{text:?} is not a date like \"1:56 pm on 8 May, 2023\"")))?,
            Some(other) => return Err(error(&date_field, format!("must be a string, got {}", kind(other)))),
            None => return Err(error(&date_field, "missing".into())),
        };
        let mut session = Session { number, at, turns: Vec::with_capacity(turns.len()) };
        for (index, turn) in turns.iter().enumerate() {
            let turn_field = format!("{field}[{index}]");
            let string = |key: &str, required: bool| -> Result<Option<String>, FormatError> {
                match turn.get(key) {
                    Some(Value::String(text)) => Ok(Some(text.clone())),
                    None | Some(Value::Null) if !required => Ok(None),
                    None => Err(error(&format!("{turn_field}.{key}"), "missing".into())),
                    Some(other) => {
                        Err(error(&format!("{turn_field}.{key}"), format!("must be a string, got {}", kind(other))))
                    }
                }
            };
            let speaker = string("speaker", true)?.unwrap_or_default();
            let dia_id = string("dia_id", true)?.unwrap_or_default();
            let said = string("text", true)?.unwrap_or_default();
            let text = match string("blip_caption", false)? {
                Some(caption) if !caption.trim().is_empty() => format!("{said} [shares a photo: {}]", caption.trim()),
                _ => said,
            };
            positions.insert(dia_id.clone(), (sessions.len(), session.turns.len()));
            session.turns.push(Turn { dia_id, speaker, text });
        }
        sessions.push(session);
    }

    // `qa` sits beside `conversation` in the published file, at the top in the others.
    let qa = root
        .get("qa")
        .or_else(|| conversation.get("qa"))
        .ok_or_else(|| error("qa", "missing".into()))?
        .as_array()
        .ok_or_else(|| error("qa", "must be a list of questions".into()))?;
    let mut questions = Vec::new();
    let mut unknown_evidence = Vec::new();
    let mut skipped_questions = 0;
    for (index, item) in qa.iter().enumerate() {
        let field = format!("qa[{index}]");
        let category = match item.get("category") {
            Some(Value::Number(number)) => number.as_i64(),
            Some(Value::String(text)) => text.trim().parse().ok(),
            _ => None,
        }
        .ok_or_else(|| error(&format!("{field}.category"), "must be a number from 1 to 5".into()))?;
        let Some(category) = Category::from_number(category) else {
            skipped_questions += 1;
            continue;
        };
        let question = match item.get("question") {
            Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
            Some(other) => {
                return Err(error(
                    &format!("{field}.question"),
                    format!("must be a non-empty string, got {}", kind(other)),
                ));
            }
            None => return Err(error(&format!("{field}.question"), "missing".into())),
        };
        let answer = match item.get("answer") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(number)) => number.to_string(),
            Some(other) => {
                return Err(error(
                    &format!("{field}.answer"),
                    format!("must be a string or a number, got {}", kind(other)),
                ));
            }
            None => return Err(error(&format!("{field}.answer"), "missing".into())),
        };
        let evidence_items = match item.get("evidence") {
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(error(
                    &format!("{field}.evidence"),
                    format!("must be a list of turn ids, got {}", kind(other)),
                ));
            }
            None => return Err(error(&format!("{field}.evidence"), "missing".into())),
        };
        let mut evidence = Vec::new();
        for (position, id) in evidence_items.iter().enumerate() {
            let id = id.as_str().ok_or_else(|| {
                error(&format!("{field}.evidence[{position}]"), format!("must be a string, got {}", kind(id)))
            })?;
            for id in expand_evidence(id) {
                match positions.get(&id) {
                    Some(&at) if !evidence.contains(&at) => evidence.push(at),
                    Some(_) => {}
                    None => unknown_evidence.push(id),
                }
            }
        }
        questions.push(Question { question, answer, category, evidence });
    }
    Ok(Conversation {
        name: name.to_owned(),
        speaker_a,
        speaker_b,
        sessions,
        questions,
        unknown_evidence,
        skipped_questions,
    })
}

/// The turn ids one evidence string names: several may share a string (`"D8:6; D9:17"`),
/// and a range names every turn from its first to its last (`"D3:4-D3:6"`, `"D3:4-6"`).
pub fn expand_evidence(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for part in text.split([';', ',', ' ']).map(str::trim).filter(|part| !part.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let Some((session, from)) = first.rsplit_once(':') else {
                    ids.push(part.to_owned());
                    continue;
                };
                let to = last.rsplit_once(':').map_or(last, |(_, number)| number);
                match (from.parse::<u32>(), to.parse::<u32>()) {
                    (Ok(from), Ok(to)) if from <= to && to - from < 1_000 => {
                        ids.extend((from..=to).map(|number| format!("{session}:{number}")));
                    }
                    _ => ids.push(part.to_owned()),
                }
            }
            None => ids.push(part.to_owned()),
        }
    }
    ids
}

/// `"1:56 pm on 8 May, 2023"` (the time may be missing: `"8 May, 2023"`), read as UTC.
pub fn parse_date_time(text: &str) -> Option<DateTime<Utc>> {
    let lower = text.trim().to_lowercase();
    let (time, date) = match lower.split_once(" on ") {
        Some((time, date)) => (Some(time.trim().to_owned()), date.trim().to_owned()),
        None => (None, lower.clone()),
    };
    let words: Vec<&str> = date.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
    let [day, month, year] = words[..] else { return None };
    let month = MONTHS.iter().position(|name| name.starts_with(month) && month.len() >= 3)? as u32 + 1;
    let date = NaiveDate::from_ymd_opt(year.parse().ok()?, month, day.parse().ok()?)?;
    let time = match time {
        Some(time) => {
            let (clock, half) = time.split_once(' ').map_or((time.as_str(), ""), |(c, h)| (c, h.trim()));
            let (hour, minute) = clock.split_once(':')?;
            let hour: u32 = hour.parse().ok()?;
            let minute: u32 = minute.parse().ok()?;
            let hour = match half {
                "am" if hour == 12 => 0,
                "pm" if hour < 12 => hour + 12,
                "am" | "pm" | "" => hour,
                _ => return None,
            };
            NaiveTime::from_hms_opt(hour, minute, 0)?
        }
        None => NaiveTime::MIN,
    };
    Some(date.and_time(time).and_utc())
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"{
      "speaker_a": "Caroline", "speaker_b": "Melanie",
      "session_1_date_time": "1:56 pm on 8 May, 2023",
      "session_1": [
        {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group yesterday."},
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "Look at this!", "blip_caption": "a photo of a sunset over a lake"},
        {"speaker": "Caroline", "dia_id": "D1:3", "text": "Lovely."}
      ],
      "session_2_date_time": "12:09 am on 13 September, 2023",
      "session_2": [
        {"speaker": "Melanie", "dia_id": "D2:1", "text": "We went camping."},
        {"speaker": "Caroline", "dia_id": "D2:2", "text": "Fun!"}
      ],
      "session_3_date_time": "10:00 am on 1 October, 2023",
      "session_1_summary": "ignored",
      "qa": [
        {"question": "When did Caroline go to the support group?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
        {"question": "What did Melanie do?", "answer": 3, "evidence": ["D1:2; D2:1"], "category": 1},
        {"question": "Anything?", "answer": "x", "evidence": ["D1:1-D1:3", "D2:1-2", "D9:9"], "category": 4},
        {"question": "Trick?", "adversarial_answer": "no", "evidence": ["D1:1"], "category": 5}
      ]
    }"#;

    #[test]
    fn reads_sessions_with_their_dates_and_captions_as_part_of_the_turn() {
        let conversation = parse("small.json", SMALL.as_bytes()).unwrap();
        assert_eq!(conversation.speaker_a, "Caroline");
        assert_eq!(conversation.speaker_b, "Melanie");
        // session_3 has a date but no turns: not a session.
        assert_eq!(conversation.sessions.len(), 2);
        assert_eq!(conversation.sessions[0].at.to_rfc3339(), "2023-05-08T13:56:00+00:00");
        assert_eq!(conversation.sessions[1].at.to_rfc3339(), "2023-09-13T00:09:00+00:00");
        assert_eq!(
            conversation.sessions[0].turns[1].text,
            "Look at this! [shares a photo: a photo of a sunset over a lake]"
        );
        assert_eq!(conversation.turn_count(), 5);
    }

    #[test]
    fn evidence_in_one_string_and_ranges_name_every_turn_and_category_5_is_left_out() {
        let conversation = parse("small.json", SMALL.as_bytes()).unwrap();
        assert_eq!(conversation.questions.len(), 3, "category 5 left out");
        assert_eq!(conversation.skipped_questions, 1);
        assert_eq!(conversation.questions[0].category, Category::Temporal);
        assert_eq!(conversation.questions[0].evidence, vec![(0, 0)]);
        assert_eq!(conversation.questions[1].answer, "3", "a numeric answer is read as text");
        assert_eq!(conversation.questions[1].evidence, vec![(0, 1), (1, 0)]);
        assert_eq!(conversation.questions[2].evidence, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
        assert_eq!(conversation.unknown_evidence, vec!["D9:9".to_owned()]);
    }

    #[test]
    fn a_file_in_the_wrong_shape_names_the_file_and_the_field() {
        let cases = [
            (r#"[1, 2]"#, "(file)"),
            (r#"{"speaker_b": "B", "session_1": [], "session_1_date_time": "8 May, 2023", "qa": []}"#, "speaker_a"),
            (r#"{"speaker_a": "A", "speaker_b": "B", "qa": []}"#, "session_1"),
            (
                r#"{"speaker_a": "A", "speaker_b": "B", "session_1": [], "session_1_date_time": "soon", "qa": []}"#,
                "session_1_date_time",
            ),
            (
                r#"{"speaker_a": "A", "speaker_b": "B", "session_1": [{"speaker": "A", "dia_id": "D1:1"}],
                    "session_1_date_time": "8 May, 2023", "qa": []}"#,
                "session_1[0].text",
            ),
            (
                r#"{"speaker_a": "A", "speaker_b": "B", "session_1": [], "session_1_date_time": "8 May, 2023",
                    "qa": [{"question": "Q?", "answer": "a", "evidence": "D1:1", "category": 1}]}"#,
                "qa[0].evidence",
            ),
            (
                r#"{"speaker_a": "A", "speaker_b": "B", "session_1": [], "session_1_date_time": "8 May, 2023",
                    "qa": [{"question": "Q?", "answer": "a", "evidence": []}]}"#,
                "qa[0].category",
            ),
            (r#"{"speaker_a": "A", "speaker_b": "B", "session_1": [], "session_1_date_time": "8 May, 2023"}"#, "qa"),
        ];
        for (text, field) in cases {
            let error = parse("bad.json", text.as_bytes()).expect_err(text);
            assert_eq!(error.file, "bad.json");
            assert_eq!(error.field, field, "{error}");
            assert!(error.to_string().starts_with(&format!("bad.json: {field}: ")), "{error}");
        }
    }

    #[test]
    fn dates_read_with_or_without_a_time() {
        assert_eq!(
            parse_date_time("12:09 am on 13 September, 2023").unwrap().to_rfc3339(),
            "2023-09-13T00:09:00+00:00"
        );
        assert_eq!(parse_date_time("12:30 pm on 1 Jan, 2024").unwrap().to_rfc3339(), "2024-01-01T12:30:00+00:00");
        assert_eq!(parse_date_time("8 May, 2023").unwrap().to_rfc3339(), "2023-05-08T00:00:00+00:00");
        assert_eq!(parse_date_time("31 February, 2023"), None);
        assert_eq!(parse_date_time("on a sunny day"), None);
    }
}
