//! Facts: what the player revealed about themselves (name, origin, family, goals, likes)
//! and what the NPC promised or revealed, each kept in the speaker's own words.

use regex::Regex;

use super::events::commits;
use super::text::Sentence;
use super::{Finding, Kind, N, P, Party, Scene, Severity, compile, negated, quote};
use crate::wire::Speaker;

pub(crate) struct Patterns {
    name_intro: Regex,
    origin: Regex,
    origin_named: Regex,
    where_from: Regex,
    family: Regex,
    family_excluded: Regex,
    goal: Regex,
    goal_trivial: Regex,
    preference: Regex,
    preference_vague: Regex,
    npc_vow: Regex,
    npc_commitment: Regex,
    npc_offer_price: Regex,
    npc_revealed: Regex,
    npc_family_event: Regex,
    request: Regex,
}

impl Patterns {
    pub fn new() -> Self {
        Self {
            name_intro: compile(
                r"(?i:\b(?:my name is|my name's|name's|name is|call me|men call me|they call me|people call me|folk call me|i am called|i'm called|i go by|i am known as|known as|(?:everyone|everybody|folk|people) calls me))\s+([A-Z][\w'-]+)",
            ),
            origin: compile(
                r"\b(?:i'm from|i am from|i come from|i came from|i hail from|where i'm from|where i come from|i grew up|i was born|i was raised|i live in|i live on|i'm a [a-z]+ from|back home in|home is|when i was a (?:boy|girl|lad|lass|child) back in|growing up (?:on|in)|where we grew up)\b",
            ),
            origin_named: compile(r"\b(?:back in|out in|up in|down in|from) [A-Z][a-z]+"),
            where_from: compile(
                r"\b(?:where's home|where is home|where are you from|where do you (?:hail|come) from|whence|where you from|where did you come from)\b",
            ),
            family: compile(
                r"\bmy (?:mother|mum|mom|ma|mam|father|dad|da|pa|papa|brother|brothers|sister|sisters|son|sons|daughter|daughters|wife|husband|children|kids|child|baby|family|parents|grandmother|grandfather|gran|granny|grandma|grandpa|uncle|aunt|auntie|cousin|cousins|nephew|niece|twin|bairns|betrothed|fiance|fiancee)\b|\b(?:daughter|son|wife|widow|husband) of\b|\bi have (?:a|two|three|four|five) (?:brothers?|sisters?|sons?|daughters?|kids|children)\b",
            ),
            family_excluded: compile(
                r"\bswear on my\b|\bmy (?:mother|mum|mom|ma|da|dad|father) (?:always |used to |would )?(?:said|says|say|call|called)\b",
            ),
            goal: compile(
                r"\b(?:i'm|i am) (?:just |only |still )?(?:looking|searching|hunting) for\b|\bi seek\b|\bi intend to\b|\b(?:i'm|i am) trying to\b|\bi want (?:to|it|them)\b|\bi need to (?:find|get|reach|learn|know)\b|\b(?:i'm|i am) (?:travell?ing|headed|heading|bound|riding|walking) (?:to|for|north|south|east|west)\b|\bi require (?:a|an|the)\b|\bwhole reason i came\b|\bi came (?:here )?to\b|\bi must (?:find|reach|get)\b|\bmy (?:goal|quest|aim|purpose) is\b|\bi (?:hope|plan|mean) to\b|\bif anyone's hiring\b|\b(?:i'm|i am) after\b",
            ),
            goal_trivial: compile(
                r"\bi want to (?:say|thank|ask|tell|talk|see you|know if|be clear|sell|buy|trade)\b|\bi came to (?:say|thank|ask|tell|see you)\b",
            ),
            preference: compile(
                r"\bi (?:really |truly |just |do |so |absolutely |confess i |must say i )?(?:love|adore|like|enjoy|hate|detest|loathe|despise|prefer|can't stand|cannot stand|can't abide|cannot abide|don't eat|don't drink|never eat|never drink|don't like|can't bear)\b|\bgive me (?:a |an |the )?[a-z]+ any day\b|\b(?:is|are) the best thing\b|\bmy favou?rite\b|\bi'm (?:fond|partial) of\b",
            ),
            preference_vague: compile(
                r"\bi (?:really |truly |just |do |so )?(?:love|like|hate|enjoy|prefer) (?:you|it|that|this|them|him|her|to think|the idea)\b",
            ),
            npc_vow: compile(
                r"\b(?:i promise|i swear|i vow|you have my word|(?:upon|on) my (?:[a-z]+ )?(?:honour|honor|life|word))",
            ),
            npc_commitment: compile(
                r"\b(?:i'll|i will|i shall|we'll|we will)\b[^.!?]{0,40}?\b(?:for (?:you|ya)\b|keep (?:the|it|a|your)\b|hold (?:it|them|the)\b|set aside|have it (?:found|ready|done|made)|pay you|ask (?:round|around)|look into|send word|make you|see (?:it|that) (?:done|you))|\b(?:never|won't) pay (?:for|a)\b|\bshall never pay\b|\bis (?:yours )?free,? always\b|\byours free\b|\b(?:'s|is) on me\b|\bready by (?:sundown|dawn|noon|tomorrow|nightfall|morning|evening|the morning|tonight)\b|\bi'll [a-z]+ you (?:a|an|some)\b|\bwithout (?:fee|charge|payment)\b|\bfreely (?:so|as) long as\b|\byour (?:secret|confidence)'s? (?:is )?safe\b|\bstays between us\b|\bi (?:shall|will) take you to\b|\bthere (?:shall|will) be\b[^.!?]*\bfor you\b",
            ),
            npc_offer_price: compile(r"\bi'll give you [a-z0-9]+ (?:silver|gold|copper|coins?|crowns?|marks?)\b"),
            npc_revealed: compile(
                r"\b(?:i used to|when i was (?:a|young|younger|little|your age)|years i|i rode with|i fought at|i served (?:with|in|under)|i was a (?:soldier|sailor|knight|thief|slave|mercenary|priest|farmer|smith|lancer)|i named (?:her|him|it)|i lost my|mine, that is|i'm leaving|threw me out|i've never told|i was born|i grew up|i come from|i have not lost|i've never lost)\b|^my own\b|\b(?:burned|killed|took|murdered|robbed) my (?:brother|sister|father|mother|wife|husband|son|daughter|family)\b|\bwas my (?:father|mother|wife|husband|son|daughter|brother|sister|grandfather|grandmother)'s\b",
            ),
            npc_family_event: compile(
                r"\bmy (?:wife|husband|son|daughter|father|mother|brother|sister|eyes|knee|leg|hands|family)\b[^.!?]{0,40}\b(?:died|dead|was taken|passed|failing|gave out|killed|lost|drowned|fell|has been|have been)\b",
            ),
            request: compile(r"\b(?:please|will you|would you|can you|could you|promise me|swear to me)\b"),
        }
    }

    /// Every fact the scene states, at most one per kind, in the order of the kinds.
    pub fn detect(&self, scene: &Scene<'_>) -> Vec<Finding> {
        let player_fact = |kind: Kind, found: Option<&Sentence<'_>>, what: &str| {
            found.map(|s| fact(kind, Party::Player, s.text, format!("{what}: {}", quote(s.text))))
        };
        let players: Vec<(usize, &Sentence<'_>)> =
            scene.sentences.iter().enumerate().filter(|(_, s)| s.by(Speaker::Player) && !s.reported).collect();
        let statement = |s: &&Sentence<'_>| !s.plain.ends_with('?');
        let name = players.iter().map(|(_, s)| *s).filter(statement).find(|s| self.introduces(scene, s));
        let origin = players
            .iter()
            .filter(|(_, s)| statement(s))
            .find(|(index, s)| {
                self.origin.find_iter(&s.plain).any(|m| !negated(&s.plain, m.start()))
                    || self.origin_named.is_match(s.text) && s.plain.contains("home")
                    || self.named_with_place(scene, s)
                    || self.answers_where(scene, *index)
            })
            .map(|(_, s)| *s);
        let family = players
            .iter()
            .map(|(_, s)| *s)
            .filter(statement)
            .find(|s| self.family.is_match(&s.plain) && !self.family_excluded.is_match(&s.plain));
        let goal = players.iter().map(|(_, s)| *s).filter(statement).find(|s| {
            self.goal.find_iter(&s.plain).any(|m| !negated(&s.plain, m.start()))
                && !self.goal_trivial.is_match(&s.plain)
        });
        let preference = players
            .iter()
            .map(|(_, s)| *s)
            .filter(statement)
            .find(|s| self.preference.is_match(&s.plain) && !self.preference_vague.is_match(&s.plain));
        let npcs: Vec<(usize, &Sentence<'_>)> =
            scene.sentences.iter().enumerate().filter(|(_, s)| s.by(Speaker::Npc) && !s.reported).collect();
        let npc_promise = npcs
            .iter()
            .filter(|(_, s)| statement(s))
            .find(|(index, s)| self.npc_promises(scene, *index, s))
            .map(|(_, s)| *s);
        let npc_revealed = npcs.iter().map(|(_, s)| *s).filter(statement).find(|s| {
            (self.npc_revealed.is_match(&s.plain) || self.npc_family_event.is_match(&s.plain))
                && !negated(&s.plain, s.plain.len().min(8))
        });
        [
            player_fact(Kind::PlayerName, name, &format!("{P} gave {N} their name")),
            player_fact(Kind::PlayerOrigin, origin, &format!("Where {P} comes from")),
            player_fact(Kind::PlayerFamily, family, &format!("{P} told {N} of their family")),
            player_fact(Kind::PlayerGoal, goal, &format!("What {P} is after")),
            player_fact(Kind::PlayerPreference, preference, &format!("What {P} likes or dislikes")),
            npc_promise.map(|s| Finding {
                target: Some(Party::Player),
                ..fact(Kind::NpcPromise, Party::Npc, s.text, format!("{N} promised {P}: {}", quote(s.text)))
            }),
            npc_revealed
                .map(|s| fact(Kind::NpcRevealed, Party::Npc, s.text, format!("{N} told {P}: {}", quote(s.text)))),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// "My name is Thessaly Varn", "Men call me Sigrun", or the player saying their own
    /// registered name as an introduction ("Wren.", "Alys Thorne, daughter of …").
    fn introduces(&self, scene: &Scene<'_>, sentence: &Sentence<'_>) -> bool {
        if self.name_intro.is_match(sentence.text) {
            return true;
        }
        let Some(first) = scene.player_first_name.as_deref() else { return false };
        let text = sentence.text.trim_start_matches(|c: char| !c.is_alphanumeric());
        let starts_with_name = text.strip_prefix(first).is_some_and(|rest| !rest.starts_with(char::is_alphanumeric));
        let i_am = ["I am ", "I'm ", "It is ", "It's "].iter().any(|intro| text.contains(&format!("{intro}{first}")));
        let is_address = text.strip_prefix(first).is_some_and(|rest| rest.trim_start().starts_with('?'));
        let then_surname_or_pause = text
            .strip_prefix(first)
            .is_some_and(|rest| rest.trim_start().starts_with(|c: char| c.is_uppercase() || c == ','));
        (starts_with_name && !is_address && (sentence.word_count() <= 12 || then_surname_or_pause)) || i_am
    }

    /// "Roderick of Vael": the player's name followed by where they are from.
    fn named_with_place(&self, scene: &Scene<'_>, sentence: &Sentence<'_>) -> bool {
        let Some(first) = scene.player_first_name.as_deref() else { return false };
        let Some(at) = sentence.text.find(first) else { return false };
        let rest = &sentence.text[at..];
        rest.split_once(" of ").is_some_and(|(before, place)| {
            before.split_whitespace().count() <= 3 && place.starts_with(char::is_uppercase)
        })
    }

    /// The player's answer right after the NPC asked where they are from.
    fn answers_where(&self, scene: &Scene<'_>, index: usize) -> bool {
        let Some(asked) = scene.sentences[..index].iter().rev().find(|s| s.by(Speaker::Npc)) else { return false };
        let first_of_reply = scene.sentences[..index].iter().rev().take_while(|s| s.by(Speaker::Player)).count() == 0;
        first_of_reply
            && self.where_from.is_match(&asked.plain)
            && scene.sentences[index].text.starts_with(char::is_uppercase)
            && !matches!(scene.sentences[index].words().next(), Some("i" | "yes" | "no" | "well" | "why"))
    }

    fn npc_promises(&self, scene: &Scene<'_>, index: usize, sentence: &Sentence<'_>) -> bool {
        let plain = &sentence.plain;
        let vowed = self.npc_vow.captures_iter(plain).any(|c| {
            let m = c.get(0).map_or(0..0, |m| m.range());
            !negated(plain, m.start) && commits(plain, m.start, &plain[m.clone()])
        });
        let committed = self.npc_commitment.find_iter(plain).any(|m| !negated(plain, m.start()))
            && !self.npc_offer_price.is_match(plain);
        // "I shall, every evening." in answer to the player's request.
        let answers_request =
            (plain.starts_with("i shall") || plain.starts_with("i will") || plain.starts_with("i'll"))
                && sentence.word_count() <= 4
                && scene.sentences[..index]
                    .iter()
                    .rev()
                    .take_while(|s| s.message + 1 >= sentence.message)
                    .any(|s| s.by(Speaker::Player) && self.request.is_match(&s.plain));
        vowed || committed || answers_request
    }
}

fn fact(kind: Kind, actor: Party, evidence: &str, statement: String) -> Finding {
    Finding {
        kind,
        actor,
        target: None,
        severity: Severity::Minor,
        evidence: evidence.to_string(),
        content: String::new(),
        statement,
        topics: Vec::new(),
        valence: None,
    }
}
