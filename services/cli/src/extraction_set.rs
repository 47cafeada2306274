//! The data extraction is measured on: the labelled game conversations in
//! `data/extraction` (what a careful human NPC would keep of each) and real everyday chats
//! from the BYU Chit-Chat corpus (where every event memory is a false one), with per-kind
//! precision and recall. Shared by `npcmem bench extract` and the pipeline test that
//! holds the rules extractor to its floors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use chrono::Utc;
use npcmem_core::extraction::rules::{Kind, RulesExtractor};
use npcmem_core::validate::ConversationLimits;
use npcmem_core::wire::{ConversationEnded, NpcInfo, PlayerInfo, Speaker, TranscriptMessage};
use serde::Deserialize;
use uuid::Uuid;

/// The corpus `deploy/local/fetch-corpus` unpacks, relative to the repository root.
pub const DEFAULT_CORPUS: &str = ".local/corpora/chitchat-dataset-0.9.0/dataset.json";

/// One labelled conversation, as a game server would send it (not yet redacted), and the
/// kinds of memory it should yield.
#[derive(Debug, Clone)]
pub struct LabelledConversation {
    pub id: String,
    pub conversation: ConversationEnded,
    pub kinds: BTreeSet<String>,
    /// Each labelled memory's kind and its evidence, a verbatim part of one message.
    pub labels: Vec<(Kind, String)>,
}

#[derive(Debug, Deserialize)]
struct Labelled {
    id: String,
    npc: Person,
    player: Person,
    messages: Vec<LabelledMessage>,
    expected: Vec<Expected>,
}

#[derive(Debug, Deserialize)]
struct Person {
    name: String,
    #[serde(default)]
    role: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LabelledMessage {
    speaker: Speaker,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Expected {
    kind: String,
    #[serde(default)]
    evidence: String,
}

/// The conversation as ingest passes it on to extract: PII redacted.
pub fn redacted(conversation: &ConversationEnded) -> ConversationEnded {
    let mut conversation = conversation.clone();
    npcmem_core::redact::PiiRedactor::shared().redact_conversation(&mut conversation);
    conversation
}

/// Every labelled conversation in the JSON-lines files of `dir` (`tuning/` or
/// `held_out/`), in file order.
pub fn load_part(dir: &Path) -> anyhow::Result<Vec<LabelledConversation>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    let mut set = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
            let labelled: Labelled = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a labelled conversation", file.display(), number + 1))?;
            let kinds: BTreeSet<String> = labelled.expected.iter().map(|e| e.kind.clone()).collect();
            if let Some(unknown) = kinds.iter().find(|kind| Kind::parse(kind).is_none()) {
                bail!("{}: {}: unknown kind {unknown}", file.display(), labelled.id);
            }
            let lines = labelled.messages.iter().map(|m| (m.speaker == Speaker::Player, m.text.as_str()));
            let conversation =
                conversation(&labelled.player.name, &labelled.npc.name, labelled.npc.role.as_deref(), lines);
            let labels = labelled
                .expected
                .iter()
                .filter_map(|e| Some((Kind::parse(&e.kind)?, e.evidence.clone())))
                .filter(|(_, evidence)| !evidence.is_empty())
                .collect();
            set.push(LabelledConversation { id: labelled.id, conversation, kinds, labels });
        }
    }
    Ok(set)
}

/// An annotator's kinds per labelled conversation id, from JSON lines of
/// `{"id": "tuning-a-001", "kinds": ["gift"]}`; unknown kinds are an error.
pub fn load_annotations(file: &Path) -> anyhow::Result<BTreeMap<String, BTreeSet<&'static str>>> {
    #[derive(Deserialize)]
    struct Annotation {
        id: String,
        kinds: Vec<String>,
    }
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut annotations = BTreeMap::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let annotation: Annotation = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not an annotation", file.display(), number + 1))?;
        let mut kinds = BTreeSet::new();
        for kind in &annotation.kinds {
            let kind =
                Kind::parse(kind).with_context(|| format!("{}:{}: unknown kind {kind}", file.display(), number + 1))?;
            kinds.insert(kind.as_str());
        }
        annotations.insert(annotation.id, kinds);
    }
    Ok(annotations)
}

/// Everyday chats `skip..skip + count` of the corpus as conversations between a player
/// "Sam" and an NPC "Brom" (the chat's first speaker plays the player), counting only the
/// chats a game server could send: within ingest's default limits on messages, text and
/// payload size.
pub fn everyday(corpus: &Path, skip: usize, count: usize) -> anyhow::Result<Vec<ConversationEnded>> {
    let limits = ConversationLimits::default();
    Ok(everyday_sessions(corpus)?
        .iter()
        .map(|turns| everyday_conversation(turns))
        .filter(|conversation| within(&limits, conversation))
        .skip(skip)
        .take(count)
        .collect())
}

/// The corpus's long chats, the ones over ingest's message limit that [`everyday`] never
/// yields, cut into consecutive windows of `window` turns (the last shorter, at least
/// two). No tool reads or trains on them: they measure false memories on everyday chat
/// that no rule was tuned to.
pub fn long_chat_windows(corpus: &Path, window: usize) -> anyhow::Result<Vec<ConversationEnded>> {
    let limits = ConversationLimits::default();
    Ok(everyday_sessions(corpus)?
        .iter()
        .filter(|turns| turns.len() > limits.max_messages)
        .flat_map(|turns| turns.chunks(window.max(2)).filter(|chunk| chunk.len() >= 2))
        .map(everyday_conversation)
        .filter(|conversation| within(&limits, conversation))
        .collect())
}

fn everyday_sessions(corpus: &Path) -> anyhow::Result<Vec<Vec<(bool, String)>>> {
    let bytes = std::fs::read(corpus).with_context(|| {
        format!("cannot read the corpus at {} (fetch it with deploy/local/fetch-corpus)", corpus.display())
    })?;
    Ok(crate::bench::everyday_chats(&bytes, usize::MAX)?.into_iter().map(|chat| chat.turns).collect())
}

fn everyday_conversation(turns: &[(bool, String)]) -> ConversationEnded {
    conversation("Sam", "Brom", None, turns.iter().map(|(is_player, text)| (*is_player, text.as_str())))
}

fn within(limits: &ConversationLimits, conversation: &ConversationEnded) -> bool {
    conversation.messages.len() <= limits.max_messages
        && conversation.messages.iter().all(|m| m.text.chars().count() <= limits.max_text_chars)
        && serde_json::to_vec(conversation).is_ok_and(|json| json.len() <= limits.max_payload_bytes)
}

fn conversation<'a>(
    player: &str,
    npc: &str,
    role: Option<&str>,
    lines: impl Iterator<Item = (bool, &'a str)>,
) -> ConversationEnded {
    let ended_at = Utc::now();
    ConversationEnded {
        schema_version: 1,
        conversation_id: Uuid::new_v4(),
        npc_id: Uuid::new_v4(),
        player_id: Uuid::new_v4(),
        npc: NpcInfo { name: npc.to_owned(), role: role.map(str::to_owned), factions: Vec::new() },
        player: PlayerInfo { name: player.to_owned(), factions: Vec::new() },
        location: None,
        started_at: ended_at - chrono::TimeDelta::minutes(5),
        ended_at,
        messages: lines
            .map(|(is_player, text)| TranscriptMessage {
                speaker: if is_player { Speaker::Player } else { Speaker::Npc },
                text: text.to_owned(),
            })
            .collect(),
    }
}

/// How one extractor did on one kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
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
        let labelled = self.true_positives + self.false_negatives;
        (labelled > 0).then(|| self.true_positives as f64 / labelled as f64)
    }

    pub fn plus(self, other: Score) -> Score {
        Score {
            true_positives: self.true_positives + other.true_positives,
            false_positives: self.false_positives + other.false_positives,
            false_negatives: self.false_negatives + other.false_negatives,
        }
    }
}

/// Per kind, how the kinds `found` for each conversation compare with its labels.
pub fn score<'a>(
    set: impl IntoIterator<Item = (&'a LabelledConversation, BTreeSet<&'static str>)>,
) -> BTreeMap<&'static str, Score> {
    let mut scores: BTreeMap<&'static str, Score> = BTreeMap::new();
    for (labelled, found) in set {
        for kind in Kind::EVENTS.into_iter().chain(Kind::FACTS).map(Kind::as_str) {
            let (is_expected, is_found) = (labelled.kinds.contains(kind), found.contains(kind));
            let score = scores.entry(kind).or_default();
            match (is_expected, is_found) {
                (true, true) => score.true_positives += 1,
                (false, true) => score.false_positives += 1,
                (true, false) => score.false_negatives += 1,
                (false, false) => {}
            }
        }
    }
    scores
}

/// The summed score of `kinds`.
pub fn total(scores: &BTreeMap<&'static str, Score>, kinds: &[Kind]) -> Score {
    kinds
        .iter()
        .fold(Score::default(), |total, kind| total.plus(scores.get(kind.as_str()).copied().unwrap_or_default()))
}

/// The kinds of the memories the rules extractor keeps of `conversation`.
pub fn kinds_kept(rules: &RulesExtractor, conversation: &ConversationEnded) -> BTreeSet<&'static str> {
    rules
        .extract(conversation)
        .iter()
        .filter_map(|memory| memory.tags.first())
        .filter_map(|tag| Kind::parse(tag))
        .map(Kind::as_str)
        .collect()
}
