//! Wrongs done to the NPC: theft, threats, insults, betrayal.

use super::*;

impl Patterns {
    pub(super) fn theft(&self, scene: &Scene<'_>) -> Option<Finding> {
        // Something of the NPC's went missing, said by the NPC before, or by the player
        // in the same message.
        let context_before = |index: usize| {
            let message = scene.sentences[index].message;
            scene.sentences[..=index].iter().any(|s| {
                let recent_npc = s.by(Speaker::Npc) && s.message + 2 >= message;
                (recent_npc || s.message == message) && self.theft_context.is_match(&s.plain)
            })
        };
        let admitted = Self::player_sentences(scene).find(|(index, s)| {
            let admits = Self::found(&self.theft_admit, s)
                && !self.theft_excuse.is_match(&s.plain)
                && (self.theft_from_npc.is_match(&s.plain) || context_before(*index));
            let owns_up = Self::found(&self.it_was_me, s)
                && *index > 0
                && context_before(index - 1)
                && !self.deny.is_match(&s.plain);
            (admits || owns_up) && !s.plain.ends_with('?')
        });
        let evidence = match admitted {
            Some((_, sentence)) => sentence,
            None => {
                let (index, caught) = Self::npc_sentences(scene).find(|(_, s)| Self::found(&self.theft_caught, s))?;
                let mut reply = scene.after(index).filter(|s| s.by(Speaker::Player)).take(2);
                let conceded = reply.any(|s| self.concede.is_match(&s.plain) && !self.deny.is_match(&s.plain));
                if !conceded {
                    return None;
                }
                caught
            }
        };
        let severity = self.theft_severity(&scene.plain);
        Some(Finding {
            kind: Kind::Theft,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity,
            evidence: evidence.text.to_string(),
            content: String::new(),
            statement: format!("{P} stole from {N}: {}", quote(evidence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    /// A jewel is worse to lose than an apple.
    pub(super) fn theft_severity(&self, whole: &str) -> Severity {
        if self.valuables.is_match(whole) {
            Severity::Severe
        } else if self.petty.is_match(whole) {
            Severity::Minor
        } else {
            Severity::Moderate
        }
    }

    pub(super) fn threat(&self, scene: &Scene<'_>) -> Option<Finding> {
        let (_, sentence) = Self::player_sentences(scene).find(|(index, s)| {
            // The harm lands on the NPC or what is theirs, within the same clause.
            let aimed = |m: regex::Match<'_>| {
                let verb = m.as_str().rsplit(' ').next().unwrap_or_default();
                let rest: Vec<&str> = s.plain[m.end()..]
                    .split(|c: char| !(c.is_alphanumeric() || c == '\''))
                    .filter(|w| !w.is_empty())
                    .take_while(|w| !matches!(*w, "but" | "maybe" | "if" | "when" | "so"))
                    .take(12)
                    .collect();
                let is_npc = |w: &&str| matches!(*w, "you" | "your" | "yours");
                match verb {
                    // "end up", "break down", "finish school": only "end you" is a threat.
                    "end" | "finish" | "break" => rest.first().is_some_and(is_npc),
                    _ => rest.iter().any(is_npc),
                }
            };
            let harm = self.harm.find_iter(&s.plain).any(|m| !negated(&s.plain, m.start()) && aimed(m));
            (harm || Self::found(&self.harm_see, s) || Self::found(&self.threat_phrase, s))
                && !self.laughed_off(scene, *index)
        })?;
        let severity = if self.deadly.is_match(&sentence.plain) { Severity::Severe } else { Severity::Moderate };
        Some(Finding {
            kind: Kind::Threat,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} threatened {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    pub(super) fn insult(&self, scene: &Scene<'_>) -> Option<Finding> {
        let (_, sentence) = Self::player_sentences(scene).find(|(index, s)| {
            // "You're right, I'm just doing stupid stuff": the speaker calls themselves names.
            let at_you = self.insult_you.find_iter(&s.plain).any(|m| {
                // "They think you're stupid", "the person you're dating is ugly": not said to the NPC.
                let before: Vec<&str> = s.plain[..m.start()].split_whitespace().rev().take(2).collect();
                let reported = before.iter().any(|w| {
                    matches!(
                        *w,
                        "think" | "thinks" | "that" | "person" | "if" | "when" | "because" | "than" | "guy" | "girl"
                    )
                });
                !reported
                    && !negated(&s.plain, m.start())
                    && !m
                        .as_str()
                        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
                        .any(|w| matches!(w, "i" | "i'm" | "my" | "me"))
            });
            let at_npc = at_you
                || Self::found(&self.insult_work, s)
                || Self::found(&self.insult_comparison, s)
                || self.vocative_insult(s);
            at_npc && !self.laughed_off(scene, *index)
        })?;
        let severity = if sentence.word_count() <= 4 { Severity::Minor } else { Severity::Moderate };
        Some(Finding {
            kind: Kind::Insult,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} insulted {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    /// "Useless old fool." — a short sentence that is nothing but a name to call someone,
    /// with no one else in it to call it.
    fn vocative_insult(&self, sentence: &Sentence<'_>) -> bool {
        const ELSEWHERE: &[&str] = &[
            "i", "i'm", "me", "my", "myself", "he", "she", "him", "her", "his", "they", "them", "that", "man's",
            "he's", "she's", "sky", "weather", "rain", "it", "it's", "is", "a", "an", "the", "like", "was", "be",
        ];
        // The whole sentence, or one clause of three words or more: "Fine, here, miserable
        // old leech" calls a name in its last one, where a bare "you fool" mid-sentence is
        // more often banter.
        let names = |text: &str, words_allowed: std::ops::RangeInclusive<usize>| {
            let words: Vec<&str> =
                text.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).collect();
            words_allowed.contains(&words.len())
                && words.iter().any(|w| INSULT_NOUNS.contains(w))
                && words.iter().any(|w| INSULT_ADJECTIVES.contains(w) || matches!(*w, "you" | "old" | "great"))
                && !words.iter().any(|w| ELSEWHERE.contains(w))
        };
        !sentence.plain.ends_with('?')
            && (names(&sentence.plain, 1..=5)
                || sentence.plain.split([',', ';', ':', '—']).any(|clause| names(clause, 3..=6)))
    }

    pub(super) fn betrayal(&self, scene: &Scene<'_>) -> Option<Finding> {
        // "That was a lie" owns up to a lie told to the NPC only when the message is about
        // them ("you", "your") or the NPC had called something out; else it corrects small
        // talk ("that was a lie, I can't do calculus").
        let told_to_npc = |sentence: &Sentence<'_>| {
            let about_npc = scene.sentences.iter().any(|other| {
                other.message == sentence.message && other.by(Speaker::Player) && mentions_you(&other.plain)
            });
            let called_out = scene.sentences.iter().any(|other| {
                other.by(Speaker::Npc)
                    && other.message < sentence.message
                    && (self.betray_accuse.is_match(&other.plain) || self.exposed.is_match(&other.plain))
            });
            about_npc || called_out
        };
        let admitted = Self::player_sentences(scene).find(|(_, s)| {
            self.betray_admit
                .find_iter(&s.plain)
                .any(|m| !negated(&s.plain, m.start()) && (!self.lie_owned.is_match(m.as_str()) || told_to_npc(s)))
        });
        let accused = || {
            Self::npc_sentences(scene).find(|(index, s)| {
                if !Self::found(&self.betray_accuse, s) || s.plain.ends_with('?') {
                    return false;
                }
                // The evidence is something besides the accusation ("you lied" is not its
                // own proof).
                let accusations: Vec<std::ops::Range<usize>> =
                    self.betray_accuse.find_iter(&s.plain).map(|m| m.range()).collect();
                let exposed = scene.sentences.iter().enumerate().any(|(at, other)| {
                    other.by(Speaker::Npc)
                        && other.message + 1 >= s.message
                        && other.message <= s.message + 2
                        && self.exposed.find_iter(&other.plain).any(|m| {
                            at != *index || !accusations.iter().any(|a| a.start < m.end() && m.start() < a.end)
                        })
                });
                let conceded = scene.reply_to(*index).any(|reply| {
                    self.concede.is_match(&reply.plain)
                        || reply.plain.starts_with("...")
                        || reply.plain.starts_with("in my defence")
                });
                exposed || conceded
            })
        };
        let (_, sentence) = admitted.or_else(accused)?;
        let oath_broken = scene.sentences.iter().any(|s| {
            s.plain.contains("swore")
                || s.plain.contains("oath")
                || s.plain.contains("sold me")
                || s.plain.contains("word")
        });
        Some(Finding {
            kind: Kind::Betrayal,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity: if oath_broken { Severity::Severe } else { Severity::Moderate },
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} broke faith with {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }
}

/// The line speaks to or about the listener.
fn mentions_you(plain: &str) -> bool {
    plain
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .any(|w| matches!(w, "you" | "your" | "yours" | "you're" | "you've" | "thee" | "thou" | "thy"))
}
