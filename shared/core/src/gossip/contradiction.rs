//! Contradicting knowledge (an injected claim must not silently overwrite what an NPC
//! knows; Graphiti's edge invalidation is the model): when an NPC learns
//! a fact that takes the opposite side of one it holds — same category, same subject,
//! opposite claim — both are kept with their provenance, and the older one is either
//! superseded (the new claim is at least as credible) or doubted (it is not: the old
//! belief loses confidence and the new one is stored as uncertain, as the original design's filter
//! does with memories that contradict what the NPC knows).
//!
//! Claims are read without an LLM, from the fact's tags and words: a small lexicon of
//! aspects people gossip about (honesty, generosity, danger, wealth, health), each with
//! words on either side, a negation just before a word flipping it ("not dangerous"),
//! and the mirror form "the cave has treasure" / "the cave has no treasure".

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use super::HeldFact;
use crate::memory::round3;

/// Words that take a side on an aspect: (aspect, words for, words against).
const ASPECTS: &[(&str, &[&str], &[&str])] = &[
    (
        "honesty",
        &["honest", "truthful", "trustworthy", "reliable", "fair", "loyal"],
        &[
            "liar",
            "lied",
            "lies",
            "dishonest",
            "cheat",
            "cheated",
            "cheater",
            "betrayal",
            "betrayed",
            "traitor",
            "thief",
            "stole",
            "theft",
            "robbed",
            "untrustworthy",
            "deceitful",
            "swindler",
        ],
    ),
    (
        "generosity",
        &["generous", "charitable", "kind", "gift", "gifts", "gave", "donated"],
        &["stingy", "greedy", "miser", "miserly", "selfish", "cheapskate"],
    ),
    (
        "danger",
        &[
            "dangerous",
            "threat",
            "threatened",
            "violent",
            "violence",
            "hostile",
            "aggressive",
            "attacked",
            "murderer",
            "killer",
            "bandits",
            "raided",
            "raid",
        ],
        &["harmless", "peaceful", "gentle", "safe", "friendly"],
    ),
    ("wealth", &["rich", "wealthy", "treasure", "gold"], &["poor", "broke", "penniless", "empty", "looted"]),
    ("health", &["alive", "healthy", "recovered"], &["dead", "died", "killed", "sick", "plague"]),
];

const NEGATIONS: &[&str] = &["not", "no", "never", "nothing", "none", "cannot", "without"];

/// Tags that say nothing about what a fact is about.
const GENERIC_TAGS: &[&str] = &["secret", "faction", "world", "news", "rumor", "rumour", "uncertain"];

/// The tag marking a fact stored while it contradicted stronger knowledge (seed's filter).
pub const UNCERTAIN_TAG: &str = "uncertain";
/// Confidence cap of such a fact (seed: `min(confidence, 0.3)`).
pub const UNCERTAIN_CONFIDENCE: f64 = 0.3;

/// What happens to a held fact a newer one contradicts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The new fact is at least as credible: the old one stays, marked superseded by it,
    /// and no longer spreads or reaches prompts.
    Superseded,
    /// The new fact is less credible: the old one's confidence drops to this value, and
    /// the new one is stored as uncertain.
    Doubted { confidence: f64 },
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Superseded => "superseded",
            Outcome::Doubted { .. } => "doubted",
        }
    }
}

/// Lowercase words with contractions opened up ("isn't" → "is", "not").
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        let word = raw.trim_matches('\'').to_lowercase();
        if word.is_empty() {
            continue;
        }
        match word.as_str() {
            "can't" => out.extend(["can".to_owned(), "not".to_owned()]),
            "won't" => out.extend(["will".to_owned(), "not".to_owned()]),
            _ => match word.strip_suffix("n't") {
                Some(base) => out.extend([base.to_owned(), "not".to_owned()]),
                None => out.push(word),
            },
        }
    }
    out
}

/// The side a fact takes on each aspect: +1, −1, or absent (no word, or words on both
/// sides). A negation up to two words before a word flips it.
fn stances(fact: &HeldFact) -> Vec<(&'static str, i8)> {
    let content = words(&fact.content);
    let mut found: Vec<(&'static str, i8)> = Vec::new();
    let mut note = |aspect: &'static str, side: i8| match found.iter_mut().find(|(a, _)| *a == aspect) {
        Some((_, existing)) if *existing != side => *existing = 0,
        Some(_) => {}
        None => found.push((aspect, side)),
    };
    for (aspect, for_words, against_words) in ASPECTS {
        let side_of = |word: &str| {
            if for_words.contains(&word) {
                Some(1i8)
            } else if against_words.contains(&word) {
                Some(-1i8)
            } else {
                None
            }
        };
        for (index, word) in content.iter().enumerate() {
            if let Some(side) = side_of(word) {
                let negated = content[index.saturating_sub(2)..index].iter().any(|w| NEGATIONS.contains(&w.as_str()));
                note(aspect, if negated { -side } else { side });
            }
        }
        for tag in &fact.tags {
            if let Some(side) = side_of(&tag.to_lowercase()) {
                note(aspect, side);
            }
        }
    }
    found.retain(|(_, side)| *side != 0);
    found
}

/// A claim's words once negations and articles are taken out, and whether it is negated
/// an odd number of times.
fn mirror_form(fact: &HeldFact) -> (Vec<String>, usize) {
    let all = words(&fact.content);
    let negations = all.iter().filter(|w| NEGATIONS.contains(&w.as_str())).count();
    let rest: Vec<String> =
        all.into_iter().filter(|w| !NEGATIONS.contains(&w.as_str()) && !ARTICLES.contains(&w.as_str())).collect();
    (rest, negations % 2)
}

/// "The cave has treasure" against "The cave has no treasure": the same words once the
/// negations are taken out, negated an odd number of times on one side only.
fn mirrored(new: &HeldFact, old: &HeldFact) -> bool {
    let (new_words, new_parity) = mirror_form(new);
    let (old_words, old_parity) = mirror_form(old);
    !new_words.is_empty() && new_words == old_words && new_parity != old_parity
}

const ARTICLES: &[&str] = &["a", "an", "the", "any"];

/// Whether both facts are about the same thing: same category and subject, and for facts
/// without a subject, a topic tag in common (two world events are not about the same
/// thing merely because neither names a subject).
fn same_topic(new: &HeldFact, old: &HeldFact) -> bool {
    if new.category != old.category || new.subject_id != old.subject_id {
        return false;
    }
    if new.subject_id.is_some() {
        return true;
    }
    !topical_tags(new).is_disjoint(&topical_tags(old))
}

/// A fact's tags that say what it is about (not generic, not an aspect word).
fn topical_tags(fact: &HeldFact) -> BTreeSet<String> {
    fact.tags
        .iter()
        .map(|tag| tag.to_lowercase())
        .filter(|tag| !GENERIC_TAGS.contains(&tag.as_str()))
        .filter(|tag| !ASPECTS.iter().any(|(_, yes, no)| yes.contains(&tag.as_str()) || no.contains(&tag.as_str())))
        .collect()
}

/// Whether `new` takes the opposite side of `old`: same topic, a different origin, and an
/// aspect on which they disagree or a mirrored claim.
pub fn contradicts(new: &HeldFact, old: &HeldFact) -> bool {
    if new.origin_fact_id == old.origin_fact_id || new.holder != old.holder || !same_topic(new, old) {
        return false;
    }
    if mirrored(new, old) {
        return true;
    }
    let old_stances = stances(old);
    stances(new).iter().any(|(aspect, side)| old_stances.iter().any(|(a, s)| a == aspect && *s == -side))
}

/// What a contradicting `new` fact does to `old` (Graphiti-style: the newer claim wins
/// unless it is less credible).
pub fn outcome(new: &HeldFact, old: &HeldFact) -> Outcome {
    if new.confidence >= old.confidence {
        Outcome::Superseded
    } else {
        // Doubt costs the old belief half of the new claim's credibility.
        Outcome::Doubted { confidence: round3((old.confidence - new.confidence / 2.0).max(0.0)) }
    }
}

/// Checks `new` against what its holder holds (`held`: same holder, not superseded) and
/// returns the revisions of held facts; when any held fact was only doubted, `new` is
/// itself marked uncertain with its confidence capped (seed filter step 5).
pub fn revise(new: &mut HeldFact, held: &[HeldFact]) -> Vec<(uuid::Uuid, Outcome)> {
    let revisions: Vec<(uuid::Uuid, Outcome)> =
        held.iter().filter(|old| contradicts(new, old)).map(|old| (old.id, outcome(new, old))).collect();
    if revisions.iter().any(|(_, outcome)| matches!(outcome, Outcome::Doubted { .. })) {
        new.confidence = round3(new.confidence.min(UNCERTAIN_CONFIDENCE));
        if !new.tags.iter().any(|tag| tag == UNCERTAIN_TAG) {
            new.tags.push(UNCERTAIN_TAG.to_owned());
        }
    }
    revisions
}

/// What a fact is about, for claim keys: its category and subject, or for a fact
/// without a subject each of its topic tags ([`same_topic`]).
fn topic_scopes(fact: &HeldFact) -> Vec<u64> {
    let scope = |topic: &dyn Fn(&mut DefaultHasher)| {
        let mut hasher = DefaultHasher::new();
        fact.category.as_str().hash(&mut hasher);
        topic(&mut hasher);
        hasher.finish()
    };
    match fact.subject_id {
        Some(subject) => vec![scope(&|hasher| subject.hash(hasher))],
        None => topical_tags(fact).iter().map(|tag| scope(&|hasher| tag.hash(hasher))).collect(),
    }
}

fn key(scope: u64, claim: &dyn Fn(&mut DefaultHasher)) -> u64 {
    let mut hasher = DefaultHasher::new();
    scope.hash(&mut hasher);
    claim(&mut hasher);
    hasher.finish()
}

/// The claims a fact makes, as keys: for each topic scope, each aspect stance and its
/// mirror form. With [`opposing_keys`], a cheap pre-check of [`contradicts`] for a holder
/// kept in memory: if no opposing key of a new fact is among the keys of what the holder
/// holds, nothing it holds is contradicted (a shared key may still be a hash collision
/// or a copy of the same origin; [`contradicts`] decides).
pub fn claim_keys(fact: &HeldFact) -> Vec<u64> {
    keys(fact, false)
}

/// The keys a held fact would need for `fact` to contradict it (see [`claim_keys`]).
pub fn opposing_keys(fact: &HeldFact) -> Vec<u64> {
    keys(fact, true)
}

fn keys(fact: &HeldFact, opposite: bool) -> Vec<u64> {
    let scopes = topic_scopes(fact);
    if scopes.is_empty() {
        // About nothing in particular (no subject, no topic tag): it can contradict nothing.
        return Vec::new();
    }
    let stances = stances(fact);
    let (mirror_words, parity) = mirror_form(fact);
    let mut out = Vec::new();
    for scope in scopes {
        for (aspect, side) in &stances {
            let side = if opposite { -side } else { *side };
            out.push(key(scope, &|hasher| (0u8, aspect, side).hash(hasher)));
        }
        if !mirror_words.is_empty() {
            let parity = if opposite { 1 - parity } else { parity };
            out.push(key(scope, &|hasher| (1u8, &mirror_words, parity).hash(hasher)));
        }
    }
    out
}

/// A held fact that a newer one contradicted, and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub fact_id: uuid::Uuid,
    pub holder: uuid::Uuid,
    /// The new fact that contradicted it.
    pub by: uuid::Uuid,
    pub outcome: Outcome,
}

/// Revises a batch of new facts in order against what their holders hold (`held`: the
/// holders' facts that are not superseded) and against the batch's earlier facts: a fact
/// doubted twice loses confidence twice, a superseded one is not revised again.
pub fn revise_batch(new_facts: &mut [HeldFact], held: Vec<HeldFact>) -> Vec<Revision> {
    // By holder: a tick's batch touches hundreds of holders, each holding a few facts.
    let mut current: HashMap<uuid::Uuid, Vec<HeldFact>> = HashMap::new();
    for fact in held {
        current.entry(fact.holder).or_default().push(fact);
    }
    // New facts still to come per holder: a new fact is kept for the later ones only.
    let mut to_come: HashMap<uuid::Uuid, usize> = HashMap::new();
    for new in new_facts.iter() {
        *to_come.entry(new.holder).or_default() += 1;
    }
    let mut revisions = Vec::new();
    for new in new_facts.iter_mut() {
        let holder = new.holder;
        let mine = current.entry(holder).or_default();
        for (fact_id, outcome) in revise(new, mine) {
            match outcome {
                Outcome::Superseded => mine.retain(|fact| fact.id != fact_id),
                Outcome::Doubted { confidence } => {
                    if let Some(fact) = mine.iter_mut().find(|fact| fact.id == fact_id) {
                        fact.confidence = confidence;
                    }
                }
            }
            revisions.push(Revision { fact_id, holder, by: new.id, outcome });
        }
        let remaining = to_come.get_mut(&holder).expect("counted above");
        *remaining -= 1;
        if *remaining > 0 {
            mine.push(new.clone());
        }
    }
    revisions
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::wire::KnowledgeCategory;

    fn fact(holder: Uuid, subject: Option<Uuid>, content: &str, tags: &[&str], confidence: f64) -> HeldFact {
        let id = Uuid::new_v4();
        HeldFact {
            id,
            origin_fact_id: id,
            holder,
            category: KnowledgeCategory::PlayerTrait,
            subject_id: subject,
            content: content.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            confidence,
            importance: 0.7,
            hop_count: 0,
            provenance: Vec::new(),
            expires_at: None,
            perspective: Default::default(),
        }
    }

    #[test]
    fn opposite_traits_of_the_same_player_contradict() {
        let (npc, aria) = (Uuid::new_v4(), Uuid::new_v4());
        let honest = fact(npc, Some(aria), "Aria is honest and paid in full", &["trade"], 0.9);
        let liar = fact(npc, Some(aria), "Aria is a liar", &[], 0.7);
        let thief = fact(npc, Some(aria), "Aria stole a sword from the forge", &["theft"], 0.9);
        let generous = fact(npc, Some(aria), "Aria is generous", &["gift"], 0.9);
        assert!(contradicts(&liar, &honest));
        assert!(contradicts(&thief, &honest));
        assert!(!contradicts(&generous, &honest), "different aspects do not contradict");
        assert!(!contradicts(&liar, &thief), "the same side does not contradict");
    }

    #[test]
    fn a_negation_flips_the_claim_and_mirrors_contradict() {
        let (npc, aria) = (Uuid::new_v4(), Uuid::new_v4());
        let dangerous = fact(npc, Some(aria), "Aria is dangerous", &[], 0.8);
        let not_dangerous = fact(npc, Some(aria), "Aria isn't dangerous at all", &[], 0.8);
        assert!(contradicts(&not_dangerous, &dangerous));
        let mut cave = fact(npc, None, "The cave has treasure", &["cave"], 1.0);
        cave.category = KnowledgeCategory::LocationInfo;
        let mut empty = fact(npc, None, "The cave has no treasure", &["cave"], 0.6);
        empty.category = KnowledgeCategory::LocationInfo;
        assert!(contradicts(&empty, &cave));
        let mut other_cave = fact(npc, None, "The cave has no treasure", &["mine"], 0.6);
        other_cave.category = KnowledgeCategory::LocationInfo;
        assert!(!contradicts(&other_cave, &cave), "facts without a subject need a topic tag in common");
    }

    #[test]
    fn other_subjects_categories_holders_and_copies_never_contradict() {
        let (npc, aria, brom) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let honest = fact(npc, Some(aria), "Aria is honest", &[], 0.9);
        assert!(!contradicts(&fact(npc, Some(brom), "Brom is a liar", &[], 0.9), &honest));
        let mut rumour = fact(npc, Some(aria), "Aria is a liar", &[], 0.9);
        rumour.category = KnowledgeCategory::NpcGossip;
        assert!(!contradicts(&rumour, &honest));
        assert!(!contradicts(&fact(Uuid::new_v4(), Some(aria), "Aria is a liar", &[], 0.9), &honest));
        let mut copy = honest.clone();
        copy.content = "Aria is not honest".into();
        assert!(!contradicts(&copy, &honest), "a copy of the same origin is not a new claim");
    }

    #[test]
    fn a_credible_claim_supersedes_and_a_weaker_one_is_doubted_both_ways() {
        let (npc, aria) = (Uuid::new_v4(), Uuid::new_v4());
        let honest = fact(npc, Some(aria), "Aria is honest", &[], 0.9);
        let mut seen_stealing = fact(npc, Some(aria), "Aria stole bread", &[], 0.9);
        assert_eq!(revise(&mut seen_stealing, std::slice::from_ref(&honest)), vec![(honest.id, Outcome::Superseded)]);
        assert_eq!(seen_stealing.confidence, 0.9);
        assert!(!seen_stealing.tags.contains(&UNCERTAIN_TAG.to_owned()));

        let mut hearsay = fact(npc, Some(aria), "Aria is a liar", &[], 0.7);
        let revisions = revise(&mut hearsay, std::slice::from_ref(&honest));
        assert_eq!(revisions, vec![(honest.id, Outcome::Doubted { confidence: 0.55 })]);
        assert_eq!(hearsay.confidence, UNCERTAIN_CONFIDENCE);
        assert_eq!(hearsay.tags, vec![UNCERTAIN_TAG.to_owned()]);
        let mut again = hearsay.clone();
        revise(&mut again, std::slice::from_ref(&honest));
        assert_eq!(again.tags, vec![UNCERTAIN_TAG.to_owned()], "the tag is added once");
    }

    #[test]
    fn a_batch_revises_in_order_and_against_its_own_earlier_facts() {
        let (npc, aria) = (Uuid::new_v4(), Uuid::new_v4());
        let honest = fact(npc, Some(aria), "Aria is honest", &[], 0.9);
        let mut batch = vec![
            fact(npc, Some(aria), "Aria is a liar", &[], 0.6),
            fact(npc, Some(aria), "Aria cheated at dice", &[], 0.4),
            fact(npc, Some(aria), "Aria is trustworthy", &[], 0.9),
        ];
        let revisions = revise_batch(&mut batch, vec![honest.clone()]);
        let summary: Vec<(Uuid, Uuid, Outcome)> = revisions.iter().map(|r| (r.fact_id, r.by, r.outcome)).collect();
        assert_eq!(
            summary,
            vec![
                // 0.9 − 0.6/2, then 0.6 − 0.4/2: doubt accumulates
                (honest.id, batch[0].id, Outcome::Doubted { confidence: 0.6 }),
                (honest.id, batch[1].id, Outcome::Doubted { confidence: 0.4 }),
                // the two uncertain claims (0.3 each) give way to the credible one
                (batch[0].id, batch[2].id, Outcome::Superseded),
                (batch[1].id, batch[2].id, Outcome::Superseded),
            ]
        );
        assert_eq!((batch[0].confidence, batch[1].confidence, batch[2].confidence), (0.3, 0.3, 0.9));
    }

    #[test]
    fn claim_keys_find_every_contradiction_the_full_check_finds() {
        let (npc, aria, brom) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut facts = Vec::new();
        for subject in [Some(aria), Some(brom), None] {
            for (content, tags) in [
                ("Aria is honest", vec!["trade"]),
                ("Aria is a liar", vec![]),
                ("She isn't dangerous", vec!["mill"]),
                ("Bandits raided the mill", vec!["mill", "bandits"]),
                ("The mill is safe now", vec!["mill"]),
                ("The cave has treasure", vec!["cave"]),
                ("The cave has no treasure", vec!["cave"]),
                ("The ale is watery", vec!["tavern"]),
                ("Brom stole the ale", vec!["tavern", "theft"]),
            ] {
                for category in [KnowledgeCategory::PlayerTrait, KnowledgeCategory::WorldEvent] {
                    let mut held = fact(npc, subject, content, &tags, 0.8);
                    held.category = category;
                    facts.push(held);
                }
            }
        }
        let mut contradictions = 0;
        for new in &facts {
            let opposing = opposing_keys(new);
            for old in &facts {
                let keyed = claim_keys(old).iter().any(|key| opposing.contains(key));
                if contradicts(new, old) {
                    contradictions += 1;
                    assert!(keyed, "keys missed {:?} against {:?}", new.content, old.content);
                }
                if keyed && new.id != old.id {
                    assert!(
                        contradicts(new, old),
                        "keys matched without a contradiction: {:?} / {:?}",
                        new.content,
                        old.content
                    );
                }
            }
        }
        assert!(contradictions >= 12, "the sample holds contradictions: {contradictions}");
    }
}
