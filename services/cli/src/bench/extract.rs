//! `npcmem bench extract`: is what the rules extractor keeps true? Precision and recall
//! per kind on the labelled set in `data/extraction` (the tuning part and the held-out
//! part scored apart), and event memories per 500 real everyday chats (the BYU Chit-Chat
//! corpus, where every event memory is a false one). Beside it, in the same run: a
//! keyword baseline that keeps a memory of a kind wherever one of the kind's words is said.
//! Conversations are redacted first, as ingest redacts them before extract sees them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use npcmem_core::extraction::rules::{Kind, RulesExtractor};
use npcmem_core::wire::{ConversationEnded, Speaker};

use crate::extraction_set::{self, Score, redacted};

#[derive(Debug, Clone, clap::Args)]
pub struct ExtractBenchArgs {
    /// The labelled set (`tuning/` and `held_out/` of JSON lines).
    #[arg(long, default_value = "data/extraction")]
    data: PathBuf,
    /// The Chit-Chat corpus (`deploy/local/fetch-corpus`).
    #[arg(long, default_value = extraction_set::DEFAULT_CORPUS)]
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

/// An extractor under test: the kinds it keeps of a conversation.
type System<'a> = dyn Fn(&ConversationEnded) -> BTreeSet<&'static str> + 'a;

pub async fn run(args: ExtractBenchArgs) -> anyhow::Result<()> {
    let rules = RulesExtractor::shared();
    // The patterns without the learned reader: what the reader adds.
    let patterns = RulesExtractor::with_reader(None);
    let systems: [(&str, &System<'_>); 3] = [
        ("rules extractor", &|c| extraction_set::kinds_kept(rules, c)),
        ("patterns alone", &|c| extraction_set::kinds_kept(&patterns, c)),
        ("keyword baseline", &keyword_kinds),
    ];
    let tuning = extraction_set::load_part(&args.data.join("tuning"))?;
    let held_out = extraction_set::load_part(&args.data.join("held_out"))?;
    for (part, set) in [("tuning", &tuning), ("held_out", &held_out)] {
        let redacted_set: Vec<ConversationEnded> = set.iter().map(|l| redacted(&l.conversation)).collect();
        let expected: usize = set.iter().map(|l| l.kinds.len()).sum();
        println!("\n{part}: {} conversations, {expected} labelled memories", set.len());
        // Never for the held-out part: it must not be read while tuning.
        if args.show && part == "tuning" {
            for (labelled, conversation) in set.iter().zip(&redacted_set) {
                let found = extraction_set::kinds_kept(rules, conversation);
                let expected: BTreeSet<&str> = labelled.kinds.iter().map(String::as_str).collect();
                if found != expected {
                    let opening: String =
                        conversation.messages.iter().map(|m| m.text.as_str()).collect::<Vec<_>>().join(" | ");
                    println!(
                        "  {} expected {expected:?}, rules {found:?}: {}",
                        labelled.id,
                        opening.chars().take(160).collect::<String>()
                    );
                }
            }
        }
        let mut table = crate::table::Table::new(&[
            "kind",
            "labelled",
            "rules P",
            "rules R",
            "patterns P",
            "patterns R",
            "keyword P",
            "keyword R",
        ]);
        let scores: Vec<BTreeMap<&str, Score>> = systems
            .iter()
            .map(|(_, system)| extraction_set::score(set.iter().zip(&redacted_set).map(|(l, c)| (l, system(c)))))
            .collect();
        for (label, kinds) in rows(&Kind::FACTS) {
            table.row(score_row(label, set.iter(), &scores, kinds));
        }
        table.write(&mut std::io::stdout())?;
    }

    agreement(&args.data, &tuning, systems[0].1)?;

    let conversations: Vec<ConversationEnded> =
        extraction_set::everyday(&args.corpus, args.everyday_skip, args.everyday)?.iter().map(redacted).collect();
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
    count_events(&systems, &conversations);
    // Never shown, and no tool trains or tunes on them: false memories on chat no rule saw.
    let windows: Vec<ConversationEnded> =
        extraction_set::long_chat_windows(&args.corpus, LONG_CHAT_WINDOW)?.iter().map(redacted).collect();
    println!(
        "\neveryday chats never read while tuning (the corpus's long chats, past ingest's message limit, cut into \
         {} windows of {LONG_CHAT_WINDOW} turns): every event memory is a false one",
        windows.len()
    );
    count_events(&systems, &windows);
    Ok(())
}

/// How independent annotators, labelling a sample of the tuning part from the guide in
/// `data/extraction/README.md` without seeing its labels, agree with those labels: how
/// well the task is defined, beside the rules extractor on the same conversations (in
/// sample: the rules were tuned on them).
fn agreement(
    data: &std::path::Path,
    tuning: &[extraction_set::LabelledConversation],
    rules: &System<'_>,
) -> anyhow::Result<()> {
    let dir = data.join("agreement");
    if !dir.is_dir() {
        return Ok(());
    }
    let mut annotators = Vec::new();
    for name in ["annotator_a", "annotator_b"] {
        annotators.push((name, extraction_set::load_annotations(&dir.join(format!("{name}.jsonl")))?));
    }
    let sample: Vec<&extraction_set::LabelledConversation> =
        tuning.iter().filter(|l| annotators[0].1.contains_key(&l.id)).collect();
    println!(
        "\nagreement: {} tuning conversations labelled again by two annotators who never saw the labels",
        sample.len()
    );
    let mut table = crate::table::Table::new(&["kind", "labelled", "A P", "A R", "B P", "B R", "rules P", "rules R"]);
    let mut scores: Vec<BTreeMap<&str, Score>> = annotators
        .iter()
        .map(|(_, kinds)| {
            extraction_set::score(sample.iter().map(|l| (*l, kinds.get(&l.id).cloned().unwrap_or_default())))
        })
        .collect();
    scores.push(extraction_set::score(sample.iter().map(|l| (*l, rules(&redacted(&l.conversation))))));
    for (label, kinds) in rows(&[]) {
        table.row(score_row(label, sample.iter().copied(), &scores, kinds));
    }
    table.write(&mut std::io::stdout())?;
    Ok(())
}

/// A row per event kind, then `facts` kind by kind, then the events and the facts together.
fn rows(facts: &'static [Kind]) -> impl Iterator<Item = (&'static str, &'static [Kind])> {
    let events: &'static [Kind] = &Kind::EVENTS;
    events
        .iter()
        .chain(facts)
        .map(|kind| (kind.as_str(), std::slice::from_ref(kind)))
        .chain([("all events", &Kind::EVENTS[..]), ("all facts", &Kind::FACTS[..])])
}

/// The label, how many of `set`'s labels are of `kinds`, and each system's precision and
/// recall on them.
fn score_row<'a>(
    label: &str,
    set: impl Iterator<Item = &'a extraction_set::LabelledConversation>,
    scores: &[BTreeMap<&'static str, Score>],
    kinds: &[Kind],
) -> Vec<String> {
    let labelled: usize = set.map(|l| kinds.iter().filter(|k| l.kinds.contains(k.as_str())).count()).sum();
    let mut row = vec![label.to_owned(), labelled.to_string()];
    for system in scores {
        let total = extraction_set::total(system, kinds);
        row.push(ratio(total.true_positives, total.true_positives + total.false_positives));
        row.push(ratio(total.true_positives, total.true_positives + total.false_negatives));
    }
    row
}

/// Turns per window of a long chat: near the median length of the corpus's other chats (17).
const LONG_CHAT_WINDOW: usize = 20;

/// Prints each system's event memories on chats where every one is false.
fn count_events(systems: &[(&str, &System<'_>)], conversations: &[ConversationEnded]) {
    for (name, system) in systems {
        let started = Instant::now();
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for conversation in conversations {
            for kind in system(conversation).into_iter().filter(|kind| Kind::parse(kind).is_some_and(Kind::is_event)) {
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
}

fn ratio(hits: usize, of: usize) -> String {
    if of == 0 { "-".to_owned() } else { format!("{:.0} % ({hits}/{of})", 100.0 * hits as f64 / of as f64) }
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
