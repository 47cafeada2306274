//! The recall benchmark's data, built deterministically from a corpus of real human chats:
//! the BYU Chit-Chat Challenge corpus (MIT licence; shipped inside the `chitchat-dataset`
//! package on PyPI, fetched by `deploy/local/fetch-corpus`), in which the same two people
//! often talked several times on different days. Each such pair becomes an NPC and a
//! player; each chat, a conversation; and probes are drawn from their earlier turns.
//!
//! Probe kinds (each scored on its own):
//! - `keywords`: the turn's three rarest content words ("Do you remember when we talked
//!   about X, Y and Z?");
//! - `word_forms`: the same words in another form the corpus uses ("painting" for
//!   "painted"), where one exists;
//! - `single_word`: the turn's rarest content word alone ("Did we ever talk about X?");
//! - `reply`: the three rarest words of a turn, the evidence being the turn that answered
//!   it, whose own words the probe does not contain.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;
use uuid::Uuid;

#[derive(Debug, Deserialize)]
struct RawChat {
    #[serde(default)]
    start: Option<DateTime<Utc>>,
    messages: Vec<Vec<RawMessage>>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    text: String,
    #[serde(default)]
    timestamp: Option<DateTime<Utc>>,
    sender: String,
}

/// One chat between the pair, turns alternating (consecutive messages of one sender
/// joined), `player` first when `first_is_player`.
#[derive(Debug, Clone)]
pub struct Session {
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub turns: Vec<(bool, String)>,
}

/// Two people who chatted several times: the NPC and the player of the benchmark.
#[derive(Debug, Clone)]
pub struct BenchPair {
    pub npc_id: Uuid,
    pub player_id: Uuid,
    /// Even pairs are the tuning half, odd ones are held out.
    pub held_out: bool,
    pub sessions: Vec<Session>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProbeKind {
    Keywords,
    WordForms,
    SingleWord,
    Reply,
}

#[derive(Debug, Clone)]
pub struct Probe {
    pub pair: usize,
    pub kind: ProbeKind,
    pub question: String,
    /// The turn that holds the answer.
    pub evidence: String,
}

/// How the benchmark is cut from the corpus.
#[derive(Debug, Clone)]
pub struct Selection {
    pub pairs: usize,
    pub min_sessions: usize,
    pub min_turns: usize,
    pub probes_per_pair: usize,
}

pub struct Benchmark {
    pub pairs: Vec<BenchPair>,
    pub probes: Vec<Probe>,
}

/// Lowercase words of at least three letters that are not stop words: what the score
/// looks for and what probes are made of (no stemming: the words as written).
pub fn content_words(text: &str) -> Vec<String> {
    static STOP: std::sync::LazyLock<HashSet<&'static str>> =
        std::sync::LazyLock::new(|| stop_words::lookup("en").unwrap_or_default().iter().copied().collect());
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|word| !STOP.contains(word.as_str()))
        .collect()
}

/// FNV-1a: a stable order for picking probes, the same on every machine and run.
fn stable_hash(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// Builds the benchmark from the corpus JSON: the pairs with the most chats of at least
/// `min_turns` turns (ties by their ids), times shifted so the newest chat ended a day
/// before `now`, and the probes.
pub fn build(corpus: &[u8], selection: &Selection, now: DateTime<Utc>) -> anyhow::Result<Benchmark> {
    let chats: BTreeMap<String, RawChat> = serde_json::from_slice(corpus)?;
    let mut by_pair: BTreeMap<(String, String), Vec<&RawChat>> = BTreeMap::new();
    for chat in chats.values() {
        let senders: std::collections::BTreeSet<&str> =
            chat.messages.iter().flatten().map(|message| message.sender.as_str()).collect();
        if senders.len() != 2 || chat.messages.len() < selection.min_turns {
            continue;
        }
        let mut senders = senders.into_iter();
        let key = (senders.next().unwrap_or_default().to_owned(), senders.next().unwrap_or_default().to_owned());
        by_pair.entry(key).or_default().push(chat);
    }
    let mut eligible: Vec<((String, String), Vec<&RawChat>)> =
        by_pair.into_iter().filter(|(_, chats)| chats.len() >= selection.min_sessions).collect();
    eligible.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    eligible.truncate(selection.pairs);

    let mut pairs = Vec::new();
    for (index, ((player, npc), chats)) in eligible.into_iter().enumerate() {
        let mut sessions: Vec<Session> = chats.iter().filter_map(|chat| session(chat, &player)).collect();
        sessions.sort_by_key(|s| s.started_at);
        pairs.push(BenchPair {
            npc_id: Uuid::new_v5(&Uuid::NAMESPACE_OID, npc.as_bytes()),
            player_id: Uuid::new_v5(&Uuid::NAMESPACE_OID, player.as_bytes()),
            held_out: index % 2 == 1,
            sessions,
        });
    }
    let newest = pairs.iter().flat_map(|p| &p.sessions).map(|s| s.ended_at).max().unwrap_or(now);
    let shift = (now - TimeDelta::days(1)) - newest;
    for session in pairs.iter_mut().flat_map(|p| &mut p.sessions) {
        session.started_at += shift;
        session.ended_at += shift;
    }
    let probes = probes(&pairs, selection.probes_per_pair);
    Ok(Benchmark { pairs, probes })
}

/// The corpus's two-person chats in their file order (chat ids sorted), each as turns
/// whose first speaker plays the player: everyday talk for counting false memories.
pub fn everyday_chats(corpus: &[u8], limit: usize) -> anyhow::Result<Vec<Session>> {
    let chats: BTreeMap<String, RawChat> = serde_json::from_slice(corpus)?;
    Ok(chats
        .values()
        .filter_map(|chat| {
            let player = &chat.messages.first()?.first()?.sender;
            session(chat, player)
        })
        .filter(|session| session.turns.len() >= 2)
        .take(limit)
        .collect())
}

fn session(chat: &RawChat, player: &str) -> Option<Session> {
    let turns: Vec<(bool, String)> = chat
        .messages
        .iter()
        .filter_map(|turn| {
            let first = turn.first()?;
            let text = turn.iter().map(|m| m.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ");
            (!text.is_empty()).then(|| (first.sender == player, text))
        })
        .collect();
    let started_at = chat.start.or_else(|| chat.messages.first()?.first()?.timestamp)?;
    let last = chat.messages.iter().flatten().filter_map(|m| m.timestamp).max().unwrap_or(started_at);
    // Chat timestamps and the start time come from different clocks: keep them in order.
    let ended_at = last.max(started_at + TimeDelta::seconds(20 * turns.len() as i64));
    (!turns.is_empty()).then_some(Session { started_at, ended_at, turns })
}

fn probes(pairs: &[BenchPair], per_pair: usize) -> Vec<Probe> {
    // Another written form of a word: the corpus's most frequent word with the same stem.
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    let mut forms: HashMap<String, BTreeMap<String, usize>> = HashMap::new();
    for (_, text) in pairs.iter().flat_map(|p| &p.sessions).flat_map(|s| &s.turns) {
        for word in content_words(text) {
            *forms.entry(stemmer.stem(&word).into_owned()).or_default().entry(word).or_insert(0) += 1;
        }
    }
    let other_form = |word: &str| {
        let variants = forms.get(stemmer.stem(word).as_ref())?;
        variants
            .iter()
            .filter(|(form, _)| form.as_str() != word)
            .max_by_key(|(_, count)| **count)
            .map(|(f, _)| f.clone())
    };

    let mut probes = Vec::new();
    for (pair_index, pair) in pairs.iter().enumerate() {
        // How many of the pair's turns use each word: the rarest words identify a turn.
        let mut frequency: HashMap<String, usize> = HashMap::new();
        for (_, text) in pair.sessions.iter().flat_map(|s| &s.turns) {
            for word in content_words(text).into_iter().collect::<HashSet<_>>() {
                *frequency.entry(word).or_insert(0) += 1;
            }
        }
        let rarest = |text: &str, count: usize| {
            let mut words: Vec<String> = content_words(text).into_iter().collect::<HashSet<_>>().into_iter().collect();
            words.sort_by(|a, b| frequency[a].cmp(&frequency[b]).then(a.cmp(b)));
            words.truncate(count);
            words
        };
        // Candidates: informative turns of every chat but the last (what working memory
        // already shows), in a stable pseudo-random order.
        let earlier = pair.sessions.len().saturating_sub(1);
        let mut candidates: Vec<(u64, usize, usize)> = Vec::new();
        for (session_index, session) in pair.sessions.iter().take(earlier).enumerate() {
            for (turn_index, (_, text)) in session.turns.iter().enumerate() {
                if content_words(text).into_iter().collect::<HashSet<_>>().len() >= 5 {
                    let key = stable_hash(&[
                        &pair.player_id.to_string(),
                        &session_index.to_string(),
                        &turn_index.to_string(),
                    ]);
                    candidates.push((key, session_index, turn_index));
                }
            }
        }
        candidates.sort_unstable();
        let kinds = [ProbeKind::Keywords, ProbeKind::WordForms, ProbeKind::SingleWord, ProbeKind::Reply];
        for (n, &(_, session_index, turn_index)) in candidates.iter().take(per_pair).enumerate() {
            let turns = &pair.sessions[session_index].turns;
            let text = &turns[turn_index].1;
            let words = rarest(text, 3);
            let probe = match kinds[n % kinds.len()] {
                ProbeKind::Keywords => Some((ProbeKind::Keywords, about(&words), text.clone())),
                ProbeKind::WordForms => {
                    let changed: Vec<String> =
                        words.iter().map(|w| other_form(w).unwrap_or_else(|| w.clone())).collect();
                    let kind = if changed == words { ProbeKind::Keywords } else { ProbeKind::WordForms };
                    Some((kind, about(&changed), text.clone()))
                }
                ProbeKind::SingleWord => Some((
                    ProbeKind::SingleWord,
                    format!("Did we ever talk about {}?", words.first().cloned().unwrap_or_default()),
                    text.clone(),
                )),
                ProbeKind::Reply => {
                    turns.get(turn_index + 1).filter(|(_, reply)| content_words(reply).len() >= 3).map(|(_, reply)| {
                        (
                            ProbeKind::Reply,
                            format!("What was said back when we talked about {}?", list(&words)),
                            reply.clone(),
                        )
                    })
                }
            };
            if let Some((kind, question, evidence)) = probe {
                probes.push(Probe { pair: pair_index, kind, question, evidence });
            }
        }
    }
    probes
}

fn about(words: &[String]) -> String {
    format!("Do you remember when we talked about {}?", list(words))
}

fn list(words: &[String]) -> String {
    match words {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORPUS: &str = r#"{
      "c1": {"start": "2018-05-01T10:00:00Z", "messages": [
        [{"text": "I adopted a puppy named Biscuit", "timestamp": "2018-05-01T10:00:05Z", "sender": "a"}],
        [{"text": "Puppies are adorable! What breed is Biscuit?", "timestamp": "2018-05-01T10:00:30Z", "sender": "b"}],
        [{"text": "A beagle mix from the shelter downtown", "timestamp": "2018-05-01T10:01:00Z", "sender": "a"}],
        [{"text": "Shelters always need volunteers on weekends", "timestamp": "2018-05-01T10:01:30Z", "sender": "b"}]]},
      "c2": {"start": "2018-05-03T10:00:00Z", "messages": [
        [{"text": "Hello again", "sender": "b"}], [{"text": "Hi there friend", "sender": "a"}]]},
      "c3": {"start": "2018-05-04T10:00:00Z", "messages": [[{"text": "alone", "sender": "z"}]]}
    }"#;

    fn selection() -> Selection {
        Selection { pairs: 10, min_sessions: 2, min_turns: 2, probes_per_pair: 10 }
    }

    #[test]
    fn pairs_with_several_chats_become_npc_and_player_with_shifted_times() {
        let now = Utc::now();
        let bench = build(CORPUS.as_bytes(), &selection(), now).unwrap();
        assert_eq!(bench.pairs.len(), 1, "the one-sender chat is no pair");
        let pair = &bench.pairs[0];
        assert_eq!(pair.sessions.len(), 2);
        assert!(pair.sessions[0].turns[0].0, "sender a, the first by id, plays the player");
        assert_eq!(pair.sessions[0].turns[1].1, "Puppies are adorable! What breed is Biscuit?");
        let newest = pair.sessions.iter().map(|s| s.ended_at).max().unwrap();
        assert_eq!(newest, now - TimeDelta::days(1));
        assert!(pair.sessions[0].started_at < pair.sessions[1].started_at);
    }

    #[test]
    fn probes_come_from_earlier_chats_and_are_the_same_every_time() {
        let now = Utc::now();
        let first = build(CORPUS.as_bytes(), &selection(), now).unwrap();
        let second = build(CORPUS.as_bytes(), &selection(), now).unwrap();
        assert!(!first.probes.is_empty());
        let questions = |b: &Benchmark| b.probes.iter().map(|p| p.question.clone()).collect::<Vec<_>>();
        assert_eq!(questions(&first), questions(&second));
        for probe in &first.probes {
            assert!(first.pairs[0].sessions[0].turns.iter().any(|(_, text)| *text == probe.evidence), "{probe:?}");
        }
    }

    #[test]
    fn content_words_skip_stop_words_and_short_words() {
        assert_eq!(content_words("I adopted a puppy, and it is so cute!"), vec!["adopted", "puppy", "cute"]);
    }
}
