//! `npcmem bench extract`: is what the rules extractor keeps true? Precision and recall
//! per kind on the labelled set in `data/extraction` (the tuning part and the held-out
//! part scored apart), and event memories per 500 real everyday chats (the BYU Chit-Chat
//! corpus, where every event memory is a false one). Beside it, in the same run: a
//! keyword baseline that keeps a memory of a kind wherever one of the kind's words is said.
//! Conversations are redacted first, as ingest redacts them before extract sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use chrono::Utc;
use npcmem_core::extraction::rules::{Kind, RulesExtractor};
use npcmem_core::redact::PiiRedactor;
use npcmem_core::wire::{ConversationEnded, NpcInfo, PlayerInfo, Speaker, TranscriptMessage};
use serde::Deserialize;
use uuid::Uuid;

use super::recall::corpus;

#[derive(Debug, Clone, clap::Args)]
pub struct ExtractBenchArgs {
    /// The labelled set (`tuning/` and `held_out/` of JSON lines).
    #[arg(long, default_value = "data/extraction")]
    data: PathBuf,
    /// The Chit-Chat corpus (`deploy/local/fetch-corpus`).
    #[arg(long, default_value = super::recall::DEFAULT_CORPUS)]
    corpus: PathBuf,
    /// Everyday chats to run through the extractor.
    #[arg(long, default_value_t = 500)]
    everyday: usize,
    /// Everyday chats passed over first. The first 500 are the measure: look at a later
    /// slice when tuning rules (e.g. `--everyday-skip 1000`).
    #[arg(long, default_value_t = 0)]
    everyday_skip: usize,
    /// Print every memory the rules extractor keeps of the everyday chats (for tuning, on
    /// a slice apart from the measured one), and the tuning conversations it gets wrong.
    #[arg(long)]
    show: bool,
}

/// The kinds that are events: on everyday chat, every one found is false.
const EVENT_KINDS: [&str; 11] =
    ["trade", "gift", "help", "combat", "rescue", "threat", "insult", "theft", "betrayal", "promise", "secret"];
const FACT_KINDS: [&str; 7] = [
    "player_name",
    "player_origin",
    "player_family",
    "player_goal",
    "player_preference",
    "npc_promise",
    "npc_revealed",
];

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
}

/// An extractor under test: the kinds it keeps of a conversation.
type System = dyn Fn(&ConversationEnded) -> BTreeSet<&'static str>;

/// How one extractor did on one kind.
#[derive(Debug, Default, Clone, Copy)]
struct Score {
    true_positives: usize,
    false_positives: usize,
    false_negatives: usize,
}

pub async fn run(args: ExtractBenchArgs) -> anyhow::Result<()> {
    let rules = RulesExtractor::shared();
    let systems: [(&str, &System); 2] =
        [("rules extractor", &|c| rules_kinds(rules, c)), ("keyword baseline", &keyword_kinds)];
    for part in ["tuning", "held_out"] {
        let set = load_part(&args.data.join(part))?;
        let expected: usize = set.iter().map(|(_, kinds)| kinds.len()).sum();
        println!("\n{part}: {} conversations, {expected} labelled memories", set.len());
        // Never for the held-out part: it must not be read while tuning.
        if args.show && part == "tuning" {
            for (conversation, expected) in &set {
                let found = rules_kinds(rules, conversation);
                let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
                if found != expected {
                    let opening: String =
                        conversation.messages.iter().map(|m| m.text.as_str()).collect::<Vec<_>>().join(" | ");
                    println!(
                        "  expected {expected:?}, rules {found:?}: {}",
                        opening.chars().take(160).collect::<String>()
                    );
                }
            }
        }
        let mut table = crate::table::Table::new(&["kind", "labelled", "rules P", "rules R", "keyword P", "keyword R"]);
        let scores: Vec<BTreeMap<&str, Score>> =
            systems.iter().map(|(_, system)| score(&set, |conversation| system(conversation))).collect();
        for kind in EVENT_KINDS.iter().chain(&FACT_KINDS) {
            let labelled = set.iter().filter(|(_, kinds)| kinds.contains(*kind)).count();
            let mut row = vec![(*kind).to_owned(), labelled.to_string()];
            for system in &scores {
                let score = system.get(kind).copied().unwrap_or_default();
                row.push(ratio(score.true_positives, score.true_positives + score.false_positives));
                row.push(ratio(score.true_positives, score.true_positives + score.false_negatives));
            }
            table.row(row);
        }
        for (label, kinds) in [("all events", &EVENT_KINDS[..]), ("all facts", &FACT_KINDS[..])] {
            let labelled: usize =
                set.iter().map(|(_, expected)| kinds.iter().filter(|k| expected.contains(**k)).count()).sum();
            let mut row = vec![label.to_owned(), labelled.to_string()];
            for system in &scores {
                let total = kinds.iter().fold(Score::default(), |total, kind| {
                    let score = system.get(kind).copied().unwrap_or_default();
                    Score {
                        true_positives: total.true_positives + score.true_positives,
                        false_positives: total.false_positives + score.false_positives,
                        false_negatives: total.false_negatives + score.false_negatives,
                    }
                });
                row.push(ratio(total.true_positives, total.true_positives + total.false_positives));
                row.push(ratio(total.true_positives, total.true_positives + total.false_negatives));
            }
            table.row(row);
        }
        table.write(&mut std::io::stdout())?;
    }

    let corpus = std::fs::read(&args.corpus).with_context(|| {
        format!("cannot read the corpus at {} (fetch it with deploy/local/fetch-corpus)", args.corpus.display())
    })?;
    let chats = corpus::everyday_chats(&corpus, args.everyday_skip + args.everyday)?;
    let chats = &chats[args.everyday_skip.min(chats.len())..];
    let conversations: Vec<ConversationEnded> = chats
        .iter()
        .map(|chat| {
            conversation("Sam", "Brom", None, chat.turns.iter().map(|(is_player, text)| (*is_player, text.as_str())))
        })
        .collect();
    if args.show {
        for (number, conversation) in conversations.iter().enumerate() {
            for finding in rules.findings(conversation).iter().filter(|f| f.kind.is_event()) {
                println!(
                    "chat {}: [{}] {} (from: {})",
                    args.everyday_skip + number,
                    finding.kind.as_str(),
                    finding.content,
                    finding.evidence
                );
            }
        }
    }
    println!(
        "\neveryday chats (BYU Chit-Chat, {} from number {}): every event memory is a false one",
        conversations.len(),
        args.everyday_skip
    );
    for (name, system) in &systems {
        let started = Instant::now();
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for conversation in &conversations {
            for kind in system(conversation).into_iter().filter(|kind| EVENT_KINDS.contains(kind)) {
                *by_kind.entry(kind).or_default() += 1;
            }
        }
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let events: usize = by_kind.values().sum();
        let kinds: Vec<String> = by_kind.iter().map(|(kind, count)| format!("{kind} {count}")).collect();
        println!(
            "  {name}: {events} event memories ({:.1} per 500 chats: {}), {:.0} conversations/s on one core",
            events as f64 * 500.0 / conversations.len().max(1) as f64,
            kinds.join(", "),
            conversations.len() as f64 / seconds
        );
    }
    Ok(())
}

/// Each labelled conversation and the kinds it should yield.
fn load_part(dir: &Path) -> anyhow::Result<Vec<(ConversationEnded, BTreeSet<String>)>> {
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
            if let Some(unknown) =
                kinds.iter().find(|k| !EVENT_KINDS.contains(&k.as_str()) && !FACT_KINDS.contains(&k.as_str()))
            {
                bail!("{}: {}: unknown kind {unknown}", file.display(), labelled.id);
            }
            let lines = labelled.messages.iter().map(|m| (m.speaker == Speaker::Player, m.text.as_str()));
            set.push((
                conversation(&labelled.player.name, &labelled.npc.name, labelled.npc.role.as_deref(), lines),
                kinds,
            ));
        }
    }
    Ok(set)
}

/// A `conversation.ended` of these lines, redacted as ingest redacts it before extract
/// sees it.
fn conversation<'a>(
    player: &str,
    npc: &str,
    role: Option<&str>,
    lines: impl Iterator<Item = (bool, &'a str)>,
) -> ConversationEnded {
    let ended_at = Utc::now();
    let mut conversation = ConversationEnded {
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
    };
    PiiRedactor::shared().redact_conversation(&mut conversation);
    conversation
}

fn score(
    set: &[(ConversationEnded, BTreeSet<String>)],
    system: impl Fn(&ConversationEnded) -> BTreeSet<&'static str>,
) -> BTreeMap<&'static str, Score> {
    let mut scores: BTreeMap<&'static str, Score> = BTreeMap::new();
    for (conversation, expected) in set {
        let found = system(conversation);
        for kind in EVENT_KINDS.iter().chain(&FACT_KINDS) {
            let (is_expected, is_found) = (expected.contains(*kind), found.contains(kind));
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

fn ratio(hits: usize, of: usize) -> String {
    if of == 0 { "-".to_owned() } else { format!("{:.0} % ({hits}/{of})", 100.0 * hits as f64 / of as f64) }
}

/// The kinds of what the rules extractor keeps.
fn rules_kinds(rules: &RulesExtractor, conversation: &ConversationEnded) -> BTreeSet<&'static str> {
    rules
        .extract(conversation)
        .iter()
        .filter_map(|memory| memory.tags.first())
        .filter_map(|tag| Kind::parse(tag))
        .map(Kind::as_str)
        .collect()
}

/// A memory of a kind wherever one of its words is in a line of the right speaker.
fn keyword_kinds(conversation: &ConversationEnded) -> BTreeSet<&'static str> {
    const PLAYER_WORDS: [(&str, &[&str]); 16] = [
        ("trade", &["buy", "bought", "sell", "sold", "price", "gold", "coins"]),
        ("gift", &["gift", "present", "for you"]),
        ("help", &["help", "helped", "favour", "favor"]),
        ("combat", &["fight", "fought", "battle", "attack"]),
        ("rescue", &["save", "saved", "rescue", "rescued"]),
        ("threat", &["kill", "burn", "hurt", "regret", "watch your back"]),
        ("insult", &["idiot", "fool", "stupid", "useless", "ugly"]),
        ("theft", &["steal", "stole", "stolen", "took your", "thief"]),
        ("betrayal", &["lied", "betray", "sorry i", "didn't keep"]),
        ("promise", &["promise", "i swear", "i will", "i'll"]),
        ("secret", &["secret", "don't tell", "between us"]),
        ("player_name", &["my name", "call me", "i'm called"]),
        ("player_origin", &["i'm from", "i come from", "i live in", "grew up"]),
        (
            "player_family",
            &["my brother", "my sister", "my mother", "my father", "my wife", "my husband", "my son", "my daughter"],
        ),
        ("player_goal", &["looking for", "i want to", "i need to", "searching for"]),
        ("player_preference", &["i love", "i like", "i hate", "favourite", "favorite"]),
    ];
    const NPC_WORDS: [(&str, &[&str]); 2] = [
        ("npc_promise", &["promise", "i swear", "i will", "i'll"]),
        ("npc_revealed", &["i used to", "when i was", "my "]),
    ];
    let mut kinds = BTreeSet::new();
    for message in &conversation.messages {
        let lower = message.text.to_lowercase();
        let words: &[(&str, &[&str])] = match message.speaker {
            Speaker::Player => &PLAYER_WORDS,
            Speaker::Npc => &NPC_WORDS,
        };
        for (kind, cues) in words {
            if cues.iter().any(|cue| lower.contains(cue)) {
                kinds.insert(*kind);
            }
        }
    }
    kinds
}
