//! What the player gave their word on or confided: promises and secrets.

use super::*;

impl Patterns {
    pub(super) fn promise(&self, scene: &Scene<'_>) -> Option<Finding> {
        let vowed_or_committed = Self::player_sentences(scene).find(|(index, s)| {
            let plain = &s.plain;
            let vowed = self.vow.captures_iter(plain).any(|c| {
                let m = c.get(0).map_or(0..0, |m| m.range());
                !negated(plain, m.start) && commits(plain, m.start, &plain[m.clone()])
            }) && !self.vow_past.is_match(plain);
            // The debt is named in this message or the three before it.
            let owed = || {
                scene.sentences.iter().any(|other| {
                    other.message + 3 >= s.message && other.message <= s.message && self.debt.is_match(&other.plain)
                })
            };
            let committed = self
                .commitment
                .find_iter(plain)
                .any(|m| !negated(plain, m.start()) && (!m.as_str().ends_with("work it off") || owed()))
                && !self.hypothetical.is_match(plain)
                && !self.commitment_excluded.is_match(plain);
            (vowed || committed) && !plain.ends_with('?') && !self.laughed_off(scene, *index)
        });
        // "I'll ride to Renna myself. I swear it.": a bare vow seals the plan the player
        // stated just before it in the same message.
        let sealed = || {
            Self::player_sentences(scene).find_map(|(index, s)| {
                let bare = s.word_count() <= 4 && self.vow.is_match(&s.plain) && !negated(&s.plain, 0);
                if !bare || self.laughed_off(scene, index) {
                    return None;
                }
                scene.sentences[..index]
                    .iter()
                    .rev()
                    .take_while(|earlier| earlier.message == s.message)
                    .find(|earlier| {
                        self.plan.is_match(&earlier.plain)
                            && !earlier.plain.ends_with('?')
                            && !self.hypothetical.is_match(&earlier.plain)
                    })
                    .map(|plan| (index, plan))
            })
        };
        let (_, sentence) = vowed_or_committed.or_else(sealed)?;
        let severity = if self.solemn.is_match(&sentence.plain) {
            Severity::Severe
        } else if self.vow.is_match(&sentence.plain) {
            Severity::Moderate
        } else {
            Severity::Minor
        };
        Some(Finding {
            kind: Kind::Promise,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} promised {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    pub(super) fn secret(&self, scene: &Scene<'_>) -> Option<Finding> {
        let players: Vec<&Sentence<'_>> = scene.said_by(Speaker::Player).collect();
        // "If you don't tell anyone, …" supposes; it confides nothing.
        let marked = players.iter().position(|s| {
            let asks_to_tell = s.plain.starts_with("can i tell you") || s.plain.contains("can you keep a secret");
            (!s.plain.ends_with('?') || asks_to_tell)
                && self.secret_marker.find_iter(&s.plain).any(|m| {
                    let before = &s.plain[..m.start()];
                    !before.split_whitespace().rev().take(3).any(|w| w == "if")
                })
        });
        let framed = || {
            let frame = players.iter().position(|s| self.confession_frame.is_match(&s.plain))?;
            players[frame..].iter().take(6).position(|s| Self::found(&self.confessed_deed, s)).map(|at| frame + at)
        };
        let told = match marked {
            Some(at) => confided(&players, at),
            None => players[framed()?],
        };
        let grave = players.iter().any(|s| self.grave_deed.is_match(&s.plain));
        let severity = if grave { Severity::Severe } else { Severity::Moderate };
        Some(Finding {
            kind: Kind::Secret,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity,
            evidence: told.text.to_string(),
            content: String::new(),
            statement: format!("{P} confided a secret to {N}: {}", quote(told.text)),
            topics: Vec::new(),
            valence: None,
        })
    }
}

/// The sentence a secret marker points at: the marked sentence when it says something
/// besides the marker ("I've never told anyone, but I can't swim"); the message's first
/// statement when the marker trails it ("I can't read. … Please don't tell anyone."); else
/// the next statement the player makes about themselves; else the marked sentence.
fn confided<'s, 'a>(players: &[&'s Sentence<'a>], at: usize) -> &'s Sentence<'a> {
    let marked = players[at];
    if marked.plain.split_once(", but ").is_some_and(|(_, after)| after.split_whitespace().count() >= 3) {
        return marked;
    }
    let (before_marker, _) =
        marked.plain.split_once("don't tell").or_else(|| marked.plain.split_once("please don't")).unwrap_or(("", ""));
    if before_marker.split_whitespace().count() >= 4 {
        return marked;
    }
    let earlier_in_message = players[..at]
        .iter()
        .filter(|s| s.message == marked.message && !s.plain.ends_with('?') && s.word_count() >= 3)
        .copied()
        .next();
    if let Some(statement) = earlier_in_message {
        return statement;
    }
    players[at + 1..]
        .iter()
        .take(4)
        .find(|s| {
            !s.plain.ends_with('?')
                && s.word_count() >= 3
                && s.words().any(|w| matches!(w, "i" | "i'm" | "i've" | "my" | "me" | "i'd" | "it was"))
        })
        .copied()
        .unwrap_or(marked)
}

/// Whether the sentence around "I promise" / "I swear" (the vow at `start` of `plain`)
/// commits the speaker to something; the other vows ("you have my word") always do.
pub(crate) fn commits(plain: &str, start: usize, vow: &str) -> bool {
    if !(vow == "i promise" || vow == "i swear") {
        return true;
    }
    let from = plain[..start].rfind(['.', '!', '?']).map_or(0, |end| end + 1);
    let to = plain[start..].find(['.', '!', '?']).map_or(plain.len(), |end| start + end);
    let sentence = &plain[from..to];
    let after = plain[start + vow.len()..to].trim_start_matches([',', ':', ' ']);
    const COMMITMENTS: &[&str] =
        &["i will", "i'll", "i shall", "i won't", "i will not", "i'd never", "never", "not to", "you will", "you'll"];
    (after.starts_with("to ") && !after.starts_with("to god") && !after.starts_with("to you"))
        || COMMITMENTS.iter().any(|commitment| sentence.contains(commitment))
}
