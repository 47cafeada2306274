//! What the player did for or against the NPC: gifts, help, rescues, fights.

use super::trade::item_in;
use super::*;

impl Patterns {
    /// A gift; beside a trade only when said outright ("a gift for you"), since "take it"
    /// there hands over what was bought.
    pub(super) fn gift(&self, scene: &Scene<'_>, traded: bool) -> Option<Finding> {
        let (_, sentence) = Self::player_sentences(scene).find(|(index, s)| {
            // "Take the cloak." handed over, short, and the NPC reacts to it.
            let handed = !traded
                && self.gift_handed.is_match(&s.plain)
                && s.word_count() <= 6
                && scene
                    .reply_to(*index)
                    .any(|reply| self.gratitude.is_match(&reply.plain) || reply.plain.contains('?'));
            // "Take this cloak." — "Nay. Keep thy cloak."
            let declined = scene.reply_to(*index).next().is_some_and(|reply| self.declines.is_match(&reply.plain));
            let marked = Self::found(&self.gift_marker, s) && (!traded || self.gift_explicit.is_match(&s.plain));
            (marked || handed)
                && !declined
                && s.word_count() <= 30
                && !self.gift_excluded.is_match(&s.plain)
                && !self.price.is_match(&s.plain)
                && !s.plain.ends_with('?')
        })?;
        let item = item_in(std::slice::from_ref(sentence));
        let statement = match item {
            Some(item) => format!("{P} gave {N} {item} as a gift"),
            None => format!("{P} gave {N} a gift: {}", quote(sentence.text)),
        };
        Some(Finding {
            kind: Kind::Gift,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity: Severity::Minor,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement,
            topics: Vec::new(),
            valence: None,
        })
    }

    pub(super) fn help(&self, scene: &Scene<'_>) -> Option<Finding> {
        // Thanks in the NPC's next two messages, or the same one when the NPC says it.
        let thanked_after = |index: usize| {
            let from = scene.sentences[index].message;
            scene
                .sentences
                .iter()
                .skip(index)
                .filter(|s| s.by(Speaker::Npc) && s.message <= from + 3)
                .any(|s| self.gratitude.is_match(&s.plain))
        };
        let by_player = Self::player_sentences(scene).find(|(index, s)| {
            let plain = &s.plain;
            let done = Self::found(&self.help_done, s)
                && (self.for_the_npc.is_match(plain) || s.word_count() <= 6)
                && !plain.contains("brought you")
                && !plain.contains("brought this")
                && !plain.contains("got your back")
                && !self.hypothetical.is_match(plain);
            let task_done = (self.help_is_done.is_match(plain) || self.task_reported.is_match(plain))
                && s.word_count() <= 10
                && !self.schooling.is_match(plain);
            (done || task_done) && !plain.ends_with('?') && thanked_after(*index)
        });
        // "Thanks for the help" thanks something the player offered or did just before.
        let player_acted_before = |index: usize| {
            scene.sentences[..index]
                .iter()
                .rev()
                .take(4)
                .any(|s| s.by(Speaker::Player) && self.offers_help.is_match(&s.plain))
        };
        // "Cheers for luggin' them sacks up": the NPC's thanks name the labour.
        let thanks_for_labour = |s: &Sentence<'_>| {
            self.thanks_for_labour.captures(&s.plain).is_some_and(|caught| {
                let labour = caught.get(1).map_or("", |m| m.as_str());
                // Looking, keeping, watching … are labours only with something after them
                // ("watching the stall", "looking after the goats"), not "thanks for watching".
                let rest = &s.plain[caught.get(0).map_or(0, |m| m.end())..];
                let bare = self.not_a_labour.is_match(labour)
                    && !["after", "over", "the", "my", "our", "his", "her", "them", "it"]
                        .iter()
                        .any(|next| rest.strip_prefix(' ').is_some_and(|rest| rest.split(' ').next() == Some(*next)));
                !bare && !negated(&s.plain, caught.get(0).map_or(0, |m| m.start()))
            })
        };
        let (index, sentence) = by_player.or_else(|| {
            Self::npc_sentences(scene).find(|(index, s)| {
                (Self::found(&self.help_npc, s)
                    && !s.plain.ends_with('?')
                    && thanked_after(*index)
                    && (!s.plain.contains("help") || player_acted_before(*index)))
                    || thanks_for_labour(s)
            })
        })?;
        let deep =
            scene.sentences.iter().skip(index).any(|s| s.by(Speaker::Npc) && self.deep_gratitude.is_match(&s.plain));
        Some(Finding {
            kind: Kind::Help,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity: if deep { Severity::Moderate } else { Severity::Minor },
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} helped {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    pub(super) fn rescue(&self, scene: &Scene<'_>) -> Option<Finding> {
        let from_npc = Self::npc_sentences(scene).find(|(_, s)| {
            let said = Self::found(&self.rescue_npc, s) && !self.saved_trivial.is_match(&s.plain);
            // "Because of you." beside "I'm alive": the whole message says it.
            let message_says_it = self.rescue_context.is_match(&s.plain)
                && (s.plain.contains("because of you") || s.plain.contains("thanks to you"))
                && scene.sentences.iter().filter(|other| other.message == s.message).any(|other| {
                    ["alive", "live", "lives", "living", "breathing", "dead", "die", "life"]
                        .iter()
                        .any(|w| other.words().any(|x| x == *w))
                });
            let pulled_out = Self::found(&self.rescue_pulled, s) || self.rescue_counterfactual.is_match(&s.plain);
            said || message_says_it || pulled_out
        });
        // "That flock is all I have" after a flood or a fire the player was out in: the
        // NPC's livelihood was saved, told by what the player did in it.
        let livelihood = || {
            let at_stake = Self::npc_sentences(scene).any(|(_, s)| self.livelihood.is_match(&s.plain));
            (at_stake && self.disaster.is_match(&scene.plain))
                .then(|| {
                    Self::npc_sentences(scene)
                        .find(|(_, s)| Self::found(&self.player_acted, s) && !s.plain.ends_with('?'))
                })
                .flatten()
        };
        let (_, sentence) = from_npc
            .or_else(|| {
                Self::player_sentences(scene)
                    .find(|(_, s)| Self::found(&self.rescue_player, s) && !self.hypothetical.is_match(&s.plain))
            })
            .or_else(livelihood)?;
        Some(Finding {
            kind: Kind::Rescue,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity: Severity::Severe,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement: format!("{P} rescued {N}: {}", quote(sentence.text)),
            topics: Vec::new(),
            valence: None,
        })
    }

    pub(super) fn combat(&self, scene: &Scene<'_>, rescued: bool) -> Option<Finding> {
        let whole = &scene.plain;
        let fought = scene.sentences.iter().enumerate().find(|(_, s)| {
            if s.reported || s.plain.ends_with('?') || self.hypothetical.is_match(&s.plain) {
                return false;
            }
            let we_fought = Self::found(&self.combat_we, s) && self.combat_context.is_match(whole);
            we_fought || Self::found(&self.combat_said, s) || Self::found(&self.enemies_down, s)
        });
        // "You win! Get your knee off my neck": the NPC gives up a fight while hurting.
        let yielded = || {
            let hurt = Self::npc_sentences(scene).any(|(_, s)| self.hurt.is_match(&s.plain));
            Self::npc_sentences(scene).find(|(_, s)| hurt && self.yields.is_match(&s.plain))
        };
        let (sentence, against_npc_told) = match fought {
            Some((_, sentence)) => (sentence, false),
            None => (yielded()?.1, true),
        };
        let enemy = scene.sentences.iter().flat_map(|s| s.words()).find(|w| ENEMIES.contains(w)).map(str::to_string);
        let against_npc = enemy.is_none() && (against_npc_told || self.against_npc.is_match(whole));
        let severity = if rescued || whole.contains("throat") || whole.contains("die") {
            Severity::Severe
        } else {
            Severity::Moderate
        };
        let side_by_side = ["we ", "together", "beside", "alongside", "side", "both"].iter().any(|w| whole.contains(w));
        let side = if side_by_side { format!("beside {N}") } else { format!("for {N}") };
        let statement = match (&enemy, against_npc) {
            (_, true) => format!("{P} fought {N}: {}", quote(sentence.text)),
            (Some(enemy), false) => format!("{P} fought the {enemy} {side}: {}", quote(sentence.text)),
            (None, false) => format!("{P} fought {side}: {}", quote(sentence.text)),
        };
        Some(Finding {
            kind: Kind::Combat,
            actor: Party::Player,
            target: Some(if against_npc { Party::Npc } else { Party::Other }),
            severity,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement,
            topics: enemy.into_iter().collect(),
            valence: against_npc.then_some(EmotionalValence::Negative),
        })
    }
}
