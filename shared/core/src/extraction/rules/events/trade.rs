//! Trades: a price named and the player's acceptance or payment, and what changed hands.

use super::*;

impl Patterns {
    pub(super) fn trade(&self, scene: &Scene<'_>) -> Option<Finding> {
        let first_price = scene.sentences.iter().position(|s| self.price.is_match(&s.plain))?;
        // The NPC agreeing to an amount the player just offered.
        let player_offered = |index: usize| {
            scene.sentences[..index].iter().rev().take(3).any(|s| {
                s.by(Speaker::Player) && (self.price.is_match(&s.plain) || self.bare_amount.is_match(&s.plain))
            })
        };
        let accepted = scene.sentences.iter().enumerate().find(|(index, s)| {
            if s.reported || s.plain.ends_with('?') {
                return false;
            }
            match s.speaker {
                // "I'll take the steel sword." may come before the price is said.
                Speaker::Player => {
                    (*index >= first_price && self.accepts(s))
                        || (Self::found(&self.buys, s) && !s.plain.contains(" to ") && !s.plain.contains("elsewhere"))
                }
                Speaker::Npc => {
                    *index > first_price
                        && (self.npc_pays.is_match(&s.plain)
                            || (player_offered(*index) && self.npc_agrees.is_match(&s.plain)))
                }
            }
        });
        let (at, acceptance) = accepted?;
        let backed_out =
            scene.sentences[at + 1..].iter().any(|s| s.by(Speaker::Player) && self.backs_out.is_match(&s.plain));
        if backed_out {
            return None;
        }
        let price = self.agreed_price(scene, at);
        let item = item_in(std::slice::from_ref(acceptance)).or_else(|| item(scene));
        let player_sells = scene.said_by(Speaker::Player).any(|s| self.player_sells.is_match(&s.plain))
            || (acceptance.by(Speaker::Npc) && self.npc_pays.is_match(&acceptance.plain));
        let prices_said = scene.sentences.iter().filter(|s| self.price.is_match(&s.plain)).count();
        let haggled = prices_said > 1 || scene.sentences.iter().any(|s| self.haggling.is_match(&s.plain));
        let statement = match (player_sells, &item, &price) {
            (false, Some(item), Some(price)) => format!("{P} bought {item} from {N} for {price}"),
            (false, Some(item), None) => format!("{P} bought {item} from {N}"),
            (true, Some(item), Some(price)) => format!("{P} sold {N} {item} for {price}"),
            (true, Some(item), None) => format!("{P} sold {N} {item}"),
            (false, None, Some(price)) => format!("{P} paid {N} {price}"),
            (true, None, Some(price)) => format!("{N} paid {P} {price}"),
            (_, None, None) => format!("{P} traded with {N}"),
        };
        let mut topics: Vec<String> =
            item.as_deref().and_then(|item| item.split_whitespace().last()).map(str::to_string).into_iter().collect();
        topics.push("customer".to_string());
        if haggled {
            topics.push("haggling".to_string());
        }
        Some(Finding {
            kind: Kind::Trade,
            actor: Party::Player,
            target: Some(Party::Npc),
            severity: Severity::Minor,
            evidence: acceptance.text.to_string(),
            content: String::new(),
            statement,
            topics,
            valence: None,
        })
    }

    fn accepts(&self, sentence: &Sentence<'_>) -> bool {
        let plain = &sentence.plain;
        let take_elsewhere =
            plain.contains(" take it to ") || plain.contains("elsewhere") || plain.contains("take it back");
        // "Here." / "Here you are." / "here's the coin": a payment, when short or about money.
        let here = plain.starts_with("here")
            && (sentence.word_count() <= 3 || self.price.is_match(plain) || plain.contains("coin"));
        // "Take this, fifty gold for the horse."
        let hands_over_price = self.price.is_match(plain)
            && (plain.contains("take this")
                || plain.contains("take it")
                || plain.contains(", there")
                || plain.contains("here be"));
        (here || hands_over_price || self.accept.find_iter(plain).any(|m| !negated(plain, m.start())))
            && !take_elsewhere
    }

    /// The price agreed: the amount the accepting sentence (or the player's line before it)
    /// names, in the unit of the last price said; else the last price said.
    fn agreed_price(&self, scene: &Scene<'_>, at: usize) -> Option<String> {
        let said = |s: &Sentence<'_>| {
            self.price.captures_iter(&s.plain).last().map(|c| {
                let amount = c.get(1).map_or("a", |m| m.as_str()).to_string();
                let unit = c.get(2).or(c.get(3)).map_or("", |m| m.as_str()).to_string();
                (amount, unit)
            })
        };
        // The last price before the acceptance, else the first after ("I'll take the
        // sword." — "That'll be 50 gold.").
        let (amount, unit) = scene.sentences[..=at]
            .iter()
            .rev()
            .find_map(said)
            .or_else(|| scene.sentences[at..].iter().find_map(said))?;
        let named =
            scene.sentences[..=at].iter().rev().take(3).filter(|s| s.by(Speaker::Player)).find_map(|s| {
                self.bare_amount.captures(&s.plain).and_then(|c| c.get(1)).map(|m| m.as_str().to_string())
            });
        let amount = named.unwrap_or(amount);
        Some(if amount == "a" { format!("a {unit}") } else { format!("{amount} {}", normalise_unit(&unit)) })
    }
}

fn normalise_unit(unit: &str) -> &str {
    match unit {
        "gp" => "gold",
        "sp" => "silver",
        "cp" => "copper",
        other => other,
    }
}

/// The traded or given item: the first known item the player names (else the NPC).
pub(super) fn item(scene: &Scene<'_>) -> Option<String> {
    let ordered: Vec<&Sentence<'_>> = scene
        .sentences
        .iter()
        .filter(|s| s.by(Speaker::Player))
        .chain(scene.sentences.iter().filter(|s| s.by(Speaker::Npc)))
        .collect();
    item_in_refs(&ordered)
}

pub(super) fn item_in(sentences: &[Sentence<'_>]) -> Option<String> {
    let refs: Vec<&Sentence<'_>> = sentences.iter().collect();
    item_in_refs(&refs)
}

fn item_in_refs(sentences: &[&Sentence<'_>]) -> Option<String> {
    sentences.iter().find_map(|sentence| {
        let words: Vec<&str> = sentence.words().collect();
        words.iter().enumerate().find_map(|(index, word)| {
            // "iron shield": a material before another item noun is its adjective.
            let next_is_item = words.get(index + 1).is_some_and(|next| ITEMS.contains(next));
            if !ITEMS.contains(word) || next_is_item {
                return None;
            }
            let adjective =
                index.checked_sub(1).map(|i| words[i]).filter(|w| ITEM_ADJECTIVES.contains(w) || ITEMS.contains(w));
            Some(with_article(adjective, word))
        })
    })
}

/// "a steel sword", "an iron axe", "some leather boots", "some ale".
fn with_article(adjective: Option<&str>, noun: &str) -> String {
    let plural = noun.ends_with('s') && !matches!(noun, "boots" | "gauntlets" | "bolts");
    let mass = matches!(
        noun,
        "armour"
            | "armor"
            | "mail"
            | "chainmail"
            | "ale"
            | "wine"
            | "mead"
            | "bread"
            | "cheese"
            | "meat"
            | "fish"
            | "rope"
            | "leather"
            | "iron"
            | "ore"
            | "charcoal"
            | "boots"
            | "gauntlets"
            | "bolts"
            | "soup"
            | "stew"
    );
    let phrase = match adjective {
        Some(adjective) => format!("{adjective} {noun}"),
        None => noun.to_string(),
    };
    if plural || mass {
        format!("some {phrase}")
    } else if phrase.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {phrase}")
    } else {
        format!("a {phrase}")
    }
}
