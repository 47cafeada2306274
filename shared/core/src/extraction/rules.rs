//! The rule-based extractor (seed §Fallback Strategies): the offline default when
//! `NPCMEM_LLM_PROVIDER=rules`, and the fallback when the budget, the circuit breaker or
//! repeated invalid model output rule the LLM out. It recognises trade, help and quests,
//! threats, insults, gifts, combat, betrayal, heroism, promises and secrets, and emits the
//! tags the relationship rules key on (seed §RelationshipEvaluator: helpful, combat,
//! heroic, trade, threat, betrayal, gift, insult). Small talk yields nothing.
//!
//! The transcript it reads is already PII-redacted by ingest. Output is deterministic.

use std::sync::OnceLock;

use regex::Regex;

use crate::extraction::candidate::{
    ExtractedMemory, MAX_CONTENT_CHARS, MAX_EXTRACTED_IMPORTANCE, MAX_MEMORIES_PER_EXTRACTION,
};
use crate::memory::{EmotionalValence, MemoryType, round3};
use crate::summary::truncate_chars;
use crate::wire::{ConversationEnded, Speaker};

/// Pattern matching is less certain than a model reading the whole scene.
const RULES_CONFIDENCE: f64 = 0.6;
/// Quotes of the player's own words inside a memory stay short.
const QUOTE_CHARS: usize = 160;

/// Words that, shortly before a cue, turn it around ("I won't hurt you").
const NEGATIONS: &[&str] = &[
    "not", "never", "no", "won't", "wont", "wouldn't", "don't", "dont", "didn't", "didnt", "cannot", "can't", "cant",
    "shan't", "nobody", "without",
];

const ITEMS: &[&str] = &[
    "longsword",
    "sword",
    "blade",
    "dagger",
    "knife",
    "axe",
    "hammer",
    "mace",
    "spear",
    "bow",
    "crossbow",
    "arrows",
    "bolts",
    "shield",
    "armour",
    "armor",
    "helmet",
    "helm",
    "gauntlets",
    "boots",
    "cloak",
    "chainmail",
    "mail",
    "potion",
    "potions",
    "elixir",
    "herbs",
    "silverleaf",
    "rope",
    "torch",
    "torches",
    "lantern",
    "bread",
    "ale",
    "wine",
    "mead",
    "cheese",
    "meat",
    "fish",
    "horse",
    "saddle",
    "map",
    "ring",
    "amulet",
    "necklace",
    "gem",
    "gems",
    "scroll",
    "book",
    "tome",
    "staff",
    "wand",
    "pick",
    "pickaxe",
    "shovel",
    "tools",
    "nails",
    "horseshoes",
    "ore",
    "ingots",
    "iron",
    "leather",
    "furs",
    "pelts",
    "cart",
    "room",
    "bed",
    "meal",
    "charcoal",
    "lockpicks",
    "key",
];

const ITEM_ADJECTIVES: &[&str] = &[
    "steel",
    "iron",
    "silver",
    "golden",
    "wooden",
    "fine",
    "old",
    "new",
    "healing",
    "mana",
    "leather",
    "elven",
    "dwarven",
    "enchanted",
    "sturdy",
    "long",
    "short",
    "heavy",
    "light",
    "rusty",
    "sharp",
    "hunting",
    "warm",
];

const ENEMIES: &[&str] = &[
    "bandits",
    "bandit",
    "wolves",
    "wolf",
    "orcs",
    "orc",
    "goblins",
    "goblin",
    "trolls",
    "troll",
    "undead",
    "skeletons",
    "zombies",
    "raiders",
    "brigands",
    "thieves",
    "dragon",
    "monster",
    "monsters",
    "beast",
    "spiders",
    "rats",
    "cultists",
    "pirates",
    "invaders",
    "soldiers",
    "ogre",
    "giant",
];

const INSULTS: &[&str] = &[
    "fool",
    "idiot",
    "stupid",
    "worthless",
    "useless",
    "pathetic",
    "coward",
    "moron",
    "imbecile",
    "scum",
    "filth",
    "swine",
    "pig",
    "rat",
    "liar",
    "cheat",
    "fraud",
    "hack",
    "dimwit",
    "halfwit",
    "buffoon",
    "oaf",
    "peasant",
    "wretch",
    "ugly",
    "disgusting",
    "incompetent",
    "crook",
    "thief",
];

/// A category's recogniser: the transcript and the player's name in, a finding out.
type Detector = fn(&RulesExtractor, &[Line<'_>], &str) -> Option<Finding>;

/// One recognised event before ranking.
struct Finding {
    tags: Vec<String>,
    content: String,
    importance: f64,
    valence: EmotionalValence,
    intensity: f64,
}

/// One transcript line, with a lowercase copy for matching.
struct Line<'a> {
    speaker: Speaker,
    text: &'a str,
    lower: String,
}

pub struct RulesExtractor {
    price: Regex,
    trade_verb: Regex,
    /// Verbs that make a trade without a price ("I'll buy the shield").
    purchase_verb: Regex,
    sell_verb: Regex,
    help_offer: Regex,
    help_done: Regex,
    help_thanks: Regex,
    quest: Regex,
    threat: Regex,
    insult_you: Regex,
    gift: Regex,
    combat_verb: Regex,
    together: Regex,
    attack_npc: Regex,
    betrayal: Regex,
    heroic_player: Regex,
    heroic_npc: Regex,
    promise: Regex,
    secret: Regex,
    word: Regex,
}

impl Default for RulesExtractor {
    fn default() -> Self {
        Self::new()
    }
}

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the rules extractor's patterns are valid")
}

fn word_list(words: &[&str]) -> String {
    words.join("|")
}

impl RulesExtractor {
    pub fn new() -> Self {
        let number = "\\d{1,6}|a hundred|a thousand|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\
                      fifteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand";
        Self {
            price: compile(&format!(
                r"\b((?:{number})(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?)\s*(gold|silver|copper|gp|sp|cp|coins?|crowns?|marks?)\b"
            )),
            trade_verb: compile(
                r"\b(buy|buying|bought|purchase|purchased|sell|selling|sold|trade|trading|deal|haggle|price|cost|costs|pay|paid|afford|take it|i'll take|i will take|how much)\b",
            ),
            purchase_verb: compile(
                r"\b(buy|buying|bought|purchase|purchased|sell|selling|sold|i'll take the|i will take the|i'll take a|i will take a)\b",
            ),
            sell_verb: compile(
                r"\b(i'll sell|i will sell|i want to sell|i'd like to sell|sell you|selling you|i sold you|buy my|buy this from me)\b",
            ),
            help_offer: compile(
                r"\b(i'll help|i will help|i can help|let me help|i'd be glad to help|happy to help|i'll do it|i will do it|count me in|i'll handle it|i'll take care of it|i'll find|i'll get it back|i'll bring)\b",
            ),
            help_done: compile(
                r"\b(i brought (?:the|your|back)|here (?:is|are) the|i found your|i fixed|i repaired|i delivered|i finished|i completed|i've done|done what you asked|i cleared|i returned|i got it back)\b",
            ),
            help_thanks: compile(
                r"\b(thank you for (?:your |the )?help|thanks for (?:your |the )?help|you helped|you've been a great help|you have been a great help|i owe you|much obliged)\b",
            ),
            quest: compile(r"\b(quest|task|errand|job|bounty|mission|contract|favour|favor)\b"),
            threat: compile(
                r"\b(or else|i'll kill you|i will kill you|i'll end you|you'll regret|you will regret|i'll hurt you|i will hurt you|i'll burn|i will burn|watch your back|you'll pay for|you will pay for|i'll make you pay|i'll cut|last warning|i know where you live|i'll break|you'll be sorry|you will be sorry|i'll gut you|sleep with one eye open)\b",
            ),
            insult_you: compile(&format!(
                r"\b(?:you(?:'re| are)?(?: such| a| an| nothing but a| nothing but an| the| an absolute| a complete| a miserable)*|what an?|this)\s+({})\b|\byou\s+(?:smell|stink|reek)\b|\b(?:your|this) (?:shop|work|ale|food|blade|sword|wares) (?:is|are) (?:rubbish|junk|garbage|trash|worthless)\b",
                word_list(INSULTS)
            )),
            gift: compile(
                r"\b(a gift|as a gift|gift for you|my gift|a present|for you, free|free of charge|no charge|keep it|this is for you|these are for you|i brought you|take this as|a token of)\b",
            ),
            combat_verb: compile(
                r"\b(fight|fighting|fought|battle|attack|attacking|attacked|kill|killed|slay|slew|drive them off|drove them off|defend|defended|ambush|ambushed|raid|raided|hunt down|clear out|cleared out)\b",
            ),
            together: compile(
                r"\b(together|alongside|side by side|with you|we fought|we'll fight|we will fight|let's fight|fight with|fought with|at your side|by your side)\b",
            ),
            attack_npc: compile(
                r"\b(i attack you|i'll attack you|i draw my (?:sword|blade|dagger) on you|i hit you|i punch you|i strike you|i stab you)\b",
            ),
            betrayal: compile(
                r"\b(i lied to you|i lied|sold you out|i stole|stole from you|i tricked you|i betrayed|betrayed you|i told the guards about you|i broke my promise|i never intended to|i cheated you|i poisoned|i framed you|turned you in)\b",
            ),
            heroic_player: compile(
                r"\b(i saved|i rescued|i slew the|i killed the dragon|i drove off|i protected|i carried (?:him|her|them) out|i pulled (?:him|her|them) out|i stopped the)\b",
            ),
            heroic_npc: compile(
                r"\b(you saved|you rescued|you protected|you drove off|you slew|you killed the|you're a hero|you are a hero|you pulled (?:him|her|them|me) out)\b\s*([^.!?]*)",
            ),
            promise: compile(r"\b(i promise|i swear|you have my word|i give you my word|on my honou?r)\b\s*([^.!?]*)"),
            secret: compile(
                r"\b(don't tell anyone|do not tell anyone|a secret|my secret|between us|between you and me|keep this quiet|keep it quiet|no one must know|nobody must know|promise not to tell|just between)\b",
            ),
            word: compile(r"[a-z']+"),
        }
    }

    pub fn shared() -> &'static RulesExtractor {
        static SHARED: OnceLock<RulesExtractor> = OnceLock::new();
        SHARED.get_or_init(RulesExtractor::new)
    }

    /// At most 3 memories, most important first.
    pub fn extract(&self, conversation: &ConversationEnded) -> Vec<ExtractedMemory> {
        let lines: Vec<Line<'_>> = conversation
            .messages
            .iter()
            .filter(|m| !m.text.trim().is_empty())
            .map(|m| Line { speaker: m.speaker, text: m.text.trim(), lower: m.text.to_lowercase() })
            .collect();
        let player = display_name(&conversation.player.name, "The player");
        let mut findings: Vec<Finding> = Vec::new();
        let detectors: [Detector; 10] = [
            Self::heroic,
            Self::betrayal,
            Self::threat,
            Self::secret,
            Self::combat,
            Self::help,
            Self::gift,
            Self::promise,
            Self::insult,
            Self::trade,
        ];
        for detect in detectors {
            if let Some(finding) = detect(self, &lines, &player) {
                findings.push(finding);
            }
        }
        // A heroic deed against an enemy already covers the fight; "we talked about
        // fighting it" would count it twice.
        if findings.iter().any(|f| f.tags.iter().any(|t| t == "heroic")) {
            findings.retain(|f| !(f.tags.iter().any(|t| t == "combat") && f.valence == EmotionalValence::Neutral));
        }
        // Most important first; the detector order breaks ties deterministically.
        findings.sort_by(|a, b| b.importance.partial_cmp(&a.importance).unwrap_or(std::cmp::Ordering::Equal));
        findings.truncate(MAX_MEMORIES_PER_EXTRACTION);
        findings.into_iter().map(finish).collect()
    }

    fn player_lines<'l, 'a>(lines: &'l [Line<'a>]) -> impl Iterator<Item = &'l Line<'a>> {
        lines.iter().filter(|line| line.speaker == Speaker::Player)
    }

    /// First player line where `pattern` matches and is not negated.
    fn find_player<'l, 'a>(lines: &'l [Line<'a>], pattern: &Regex) -> Option<(&'l Line<'a>, regex::Match<'l>)> {
        Self::player_lines(lines).find_map(|line| {
            pattern.find_iter(&line.lower).find(|m| !negated(&line.lower, m.start())).map(|m| (line, m))
        })
    }

    fn trade(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let has_verb = lines.iter().any(|line| self.trade_verb.is_match(&line.lower));
        let price = lines.iter().rev().find_map(|line| self.price.captures(&line.lower)).map(|c| {
            let amount = c.get(1).map_or("", |m| m.as_str());
            let unit = c.get(2).map_or("", |m| m.as_str());
            format!("{amount} {}", normalise_unit(unit))
        });
        let item = self.item(lines);
        // A price with trade talk, a price next to an item ("fifty gold for the horse"),
        // or an item with an explicit purchase by the player ("I'll buy the shield").
        let price_beside_item = lines
            .iter()
            .any(|line| self.price.is_match(&line.lower) && self.item(std::slice::from_ref(line)).is_some());
        let player_purchase = Self::player_lines(lines).any(|line| self.purchase_verb.is_match(&line.lower));
        let is_trade = match (&price, &item) {
            (Some(_), _) => has_verb || price_beside_item,
            (None, Some(_)) => player_purchase,
            (None, None) => false,
        };
        if !is_trade {
            return None;
        }
        let player_sells = Self::player_lines(lines).any(|line| self.sell_verb.is_match(&line.lower));
        let content = match (player_sells, &item, &price) {
            (false, Some(item), Some(price)) => format!("{player} bought {item} from me for {price}"),
            (false, Some(item), None) => format!("{player} bought {item} from me"),
            (true, Some(item), Some(price)) => format!("{player} sold me {item} for {price}"),
            (true, Some(item), None) => format!("{player} sold me {item}"),
            (_, None, Some(price)) => format!("{player} traded with me for {price}"),
            (_, None, None) => unreachable_trade(player),
        };
        let haggled = lines.iter().any(|l| {
            l.lower.contains("robbery")
                || l.lower.contains("haggle")
                || l.lower.contains("too much")
                || l.lower.contains("too expensive")
        });
        let mut tags = vec!["trade".to_string()];
        if let Some(noun) = item.as_deref().and_then(|item| item.split_whitespace().last()) {
            tags.push(noun.to_string());
        }
        tags.push("customer".to_string());
        if haggled {
            tags.push("haggling".to_string());
        }
        Some(Finding { tags, content, importance: 0.4, valence: EmotionalValence::Neutral, intensity: 0.1 })
    }

    /// The traded item: the first known item noun the player names (else the NPC), with
    /// the adjective from the line that names it with a trade verb ("I'll take the steel
    /// sword" beats "I need a sword"), else from its first mention with one.
    fn item(&self, lines: &[Line<'_>]) -> Option<String> {
        let ordered: Vec<&Line<'_>> =
            Self::player_lines(lines).chain(lines.iter().filter(|l| l.speaker == Speaker::Npc)).collect();
        let mentions = |line: &Line<'_>| -> Vec<(String, Option<String>)> {
            let words: Vec<&str> = self.word.find_iter(&line.lower).map(|m| m.as_str()).collect();
            let mut found = Vec::new();
            for (index, word) in words.iter().enumerate() {
                // "iron shield": a material before another item noun is its adjective.
                let next_is_item = words.get(index + 1).is_some_and(|next| ITEMS.contains(next));
                if ITEMS.contains(word) && !next_is_item {
                    let adjective = index
                        .checked_sub(1)
                        .map(|i| words[i])
                        .filter(|w| ITEM_ADJECTIVES.contains(w) || ITEMS.contains(w))
                        .map(str::to_string);
                    found.push((word.to_string(), adjective));
                }
            }
            found
        };
        let noun = ordered.iter().find_map(|line| mentions(line).into_iter().next().map(|(noun, _)| noun))?;
        let adjective_in =
            |line: &&Line<'_>| mentions(line).into_iter().find(|(n, a)| *n == noun && a.is_some()).and_then(|(_, a)| a);
        let adjective = ordered
            .iter()
            .filter(|line| self.trade_verb.is_match(&line.lower))
            .find_map(adjective_in)
            .or_else(|| ordered.iter().find_map(adjective_in));
        Some(with_article(adjective.as_deref(), &noun))
    }

    fn help(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let quest = lines.iter().any(|line| self.quest.is_match(&line.lower));
        let done = Self::find_player(lines, &self.help_done);
        let thanked = lines.iter().any(|line| line.speaker == Speaker::Npc && self.help_thanks.is_match(&line.lower));
        let offered = Self::find_player(lines, &self.help_offer);
        let (content, importance, intensity) = if let Some((line, found)) = done {
            let what = clause_after(line.text, found.end());
            let content = if what.is_empty() {
                format!("{player} completed a task for me")
            } else {
                let done = line.text.get(found.start()..found.end()).unwrap_or(found.as_str());
                format!("{player} did what I asked: {}", quote(&format!("{done}{what}")))
            };
            (content, 0.6, 0.5)
        } else if thanked {
            (format!("{player} helped me"), 0.5, 0.4)
        } else if offered.is_some() {
            let content = if quest {
                format!("{player} agreed to take on a task for me")
            } else {
                format!("{player} offered to help me")
            };
            (content, 0.5, 0.3)
        } else {
            return None;
        };
        let mut tags = vec!["helpful".to_string()];
        if quest {
            tags.push("quest".to_string());
        }
        Some(Finding { tags, content, importance, valence: EmotionalValence::Positive, intensity })
    }

    fn threat(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let (line, _) =
            Self::find_player(lines, &self.threat).or_else(|| Self::find_player(lines, &self.attack_npc))?;
        Some(Finding {
            tags: vec!["threat".to_string()],
            content: format!("{player} threatened me, saying {}", quote(line.text)),
            importance: 0.6,
            valence: EmotionalValence::Negative,
            intensity: 0.7,
        })
    }

    fn insult(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let (line, found) = Self::player_lines(lines).find_map(|line| {
            self.insult_you
                .captures_iter(&line.lower)
                .find(|c| c.get(0).is_some_and(|m| !negated(&line.lower, m.start())))
                .map(|c| (line, c))
        })?;
        let content = match found.get(1) {
            Some(word) => format!("{player} insulted me, calling me a {}", word.as_str()),
            None => format!("{player} insulted me, saying {}", quote(line.text)),
        };
        Some(Finding {
            tags: vec!["insult".to_string()],
            content,
            importance: 0.4,
            valence: EmotionalValence::Negative,
            intensity: 0.5,
        })
    }

    fn gift(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let (line, _) = Self::find_player(lines, &self.gift)?;
        // "Take this, fifty gold" in the same line is a payment, not a gift.
        if self.price.is_match(&line.lower) && !line.lower.contains("free") && !line.lower.contains("gift") {
            return None;
        }
        let item = self.item(std::slice::from_ref(line));
        let content = match item {
            Some(item) => format!("{player} gave me {item} as a gift"),
            None => format!("{player} gave me a gift"),
        };
        Some(Finding {
            tags: vec!["gift".to_string()],
            content,
            importance: 0.5,
            valence: EmotionalValence::Positive,
            intensity: 0.5,
        })
    }

    fn combat(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let enemy = lines.iter().find_map(|line| {
            self.word.find_iter(&line.lower).map(|m| m.as_str()).find(|w| ENEMIES.contains(w)).map(str::to_string)
        });
        // A fight that happened: a past-tense fighting verb, not "fight" talked about.
        let fought = lines.iter().any(|line| {
            self.combat_verb
                .find_iter(&line.lower)
                .any(|m| COMBAT_PAST.contains(&m.as_str()) && !negated(&line.lower, m.start()))
        });
        if !fought {
            return None;
        }
        let together = lines.iter().any(|line| self.together.is_match(&line.lower));
        let (content, importance, valence, intensity) = match (&enemy, together) {
            (Some(enemy), true) => {
                (format!("{player} fought the {enemy} alongside me"), 0.7, EmotionalValence::Positive, 0.6)
            }
            (None, true) => (format!("{player} fought alongside me"), 0.6, EmotionalValence::Positive, 0.5),
            // Fighting talked of without the player at the NPC's side is not a shared fight.
            (_, false) => return None,
        };
        let mut tags = vec!["combat".to_string()];
        if let Some(enemy) = enemy {
            tags.push(enemy);
        }
        if together {
            tags.push("teamwork".to_string());
        }
        Some(Finding { tags, content, importance, valence, intensity })
    }

    fn betrayal(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let (line, _) = Self::find_player(lines, &self.betrayal)?;
        Some(Finding {
            tags: vec!["betrayal".to_string()],
            content: format!("{player} betrayed my trust, admitting {}", quote(line.text)),
            importance: 0.7,
            valence: EmotionalValence::Negative,
            intensity: 0.8,
        })
    }

    fn heroic(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        // The NPC confirming the deed is the stronger signal: "You saved my daughter!"
        let from_npc = lines.iter().filter(|l| l.speaker == Speaker::Npc).find_map(|line| {
            self.heroic_npc
                .captures(&line.lower)
                .filter(|c| c.get(0).is_some_and(|m| !negated(&line.lower, m.start())))
                .map(|c| {
                    let verb = c.get(1).map_or("saved", |m| m.as_str()).trim_start_matches("you ").to_string();
                    let object = c.get(2).map_or("", |m| m.as_str()).trim().to_string();
                    (verb, object)
                })
        });
        let content = match from_npc {
            Some((verb, object)) if verb.contains("hero") => format!("{player} acted as a hero{}", suffix(&object)),
            Some((verb, object)) => format!("{player} {verb}{}", suffix(&object)),
            None => {
                let (line, found) = Self::find_player(lines, &self.heroic_player)?;
                let deed =
                    format!("{}{}", found.as_str().trim_start_matches("i "), clause_after(line.text, found.end()));
                format!("{player} told me they {}", deed.trim())
            }
        };
        let mut tags = vec!["heroic".to_string()];
        if lines.iter().any(|line| self.word.find_iter(&line.lower).any(|w| ENEMIES.contains(&w.as_str()))) {
            tags.push("combat".to_string());
        }
        Some(Finding { tags, content, importance: 0.7, valence: EmotionalValence::Positive, intensity: 0.7 })
    }

    fn promise(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        // "I swear this always happens" swears to nothing: a promise commits to something.
        let line = Self::player_lines(lines).find(|line| {
            self.promise.captures_iter(&line.lower).any(|c| {
                let start = c.get(0).map_or(0, |m| m.start());
                !negated(&line.lower, start) && commits(&line.lower, start, c.get(1).map_or("", |m| m.as_str()))
            }) && !self.secret.is_match(&line.lower)
        })?;
        Some(Finding {
            tags: vec!["promise".to_string()],
            content: format!("{player} made me a promise: {}", quote(line.text)),
            importance: 0.5,
            valence: EmotionalValence::Positive,
            intensity: 0.3,
        })
    }

    fn secret(&self, lines: &[Line<'_>], player: &str) -> Option<Finding> {
        let players: Vec<&Line<'_>> = Self::player_lines(lines).collect();
        let index = players.iter().position(|line| self.secret.is_match(&line.lower))?;
        // The secret itself: the rest of the marked line, or the player's next line.
        let marked = players[index];
        let rest = self.secret.find(&marked.lower).map_or("", |m| clause_after(marked.text, m.end()));
        let told = if rest.trim_matches(|c: char| !c.is_alphanumeric()).len() >= 12 {
            rest.trim_matches(|c: char| c == ',' || c == ':' || c == '.' || c.is_whitespace()).to_string()
        } else {
            players.get(index + 1).map_or(marked.text, |next| next.text).to_string()
        };
        Some(Finding {
            tags: vec!["secret".to_string()],
            content: format!("{player} told me a secret: {}", quote(&told)),
            importance: 0.6,
            valence: EmotionalValence::Neutral,
            intensity: 0.4,
        })
    }
}

/// Combat verbs that say a fight happened.
const COMBAT_PAST: &[&str] =
    &["fought", "attacked", "killed", "slew", "drove them off", "defended", "ambushed", "raided", "cleared out"];

/// Whether the sentence around "I promise" / "I swear" (the vow at `start` of `lower`)
/// commits the speaker to something; "you have my word" and "on my honour" always do.
fn commits(lower: &str, start: usize, vow: &str) -> bool {
    if !(vow == "i promise" || vow == "i swear") {
        return true;
    }
    let from = lower[..start].rfind(['.', '!', '?']).map_or(0, |end| end + 1);
    let to = lower[start..].find(['.', '!', '?']).map_or(lower.len(), |end| start + end);
    let sentence = &lower[from..to];
    let after = lower[start + vow.len()..to].trim_start_matches([',', ':', ' ']);
    const COMMITMENTS: &[&str] =
        &["i will", "i'll", "i shall", "i won't", "i will not", "i'd never", "never", "not to", "you will", "you'll"];
    after.is_empty()
        || (after.starts_with("to ") && !after.starts_with("to god"))
        || COMMITMENTS.iter().any(|commitment| sentence.contains(commitment))
}

fn unreachable_trade(player: &str) -> String {
    // Guarded above (an item or a price is required); kept total rather than panicking.
    format!("{player} traded with me")
}

fn finish(finding: Finding) -> ExtractedMemory {
    let mut tags: Vec<String> = Vec::with_capacity(finding.tags.len());
    for tag in finding.tags {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    ExtractedMemory {
        memory_type: MemoryType::Episodic,
        content: truncate_chars(&finding.content, MAX_CONTENT_CHARS).into_owned(),
        tags,
        importance: round3(finding.importance.min(MAX_EXTRACTED_IMPORTANCE)),
        confidence: RULES_CONFIDENCE,
        emotional_valence: finding.valence,
        emotional_intensity: round3(finding.intensity),
    }
}

fn display_name(name: &str, fallback: &str) -> String {
    let trimmed = name.trim();
    if trimmed.is_empty() { fallback.to_string() } else { trimmed.to_string() }
}

fn normalise_unit(unit: &str) -> &str {
    match unit {
        "gp" => "gold",
        "sp" => "silver",
        "cp" => "copper",
        other => other,
    }
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
    );
    let phrase = match adjective {
        Some(adjective) => format!("{adjective} {noun}"),
        None => noun.to_string(),
    };
    if plural || mass {
        format!("some {phrase}")
    } else if starts_with_vowel(&phrase) {
        format!("an {phrase}")
    } else {
        format!("a {phrase}")
    }
}

fn starts_with_vowel(word: &str) -> bool {
    word.starts_with(['a', 'e', 'i', 'o', 'u'])
}

/// True when a negation word stands among the three words before `position`.
fn negated(lower: &str, position: usize) -> bool {
    let before = lower.get(..position).unwrap_or("");
    before
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .rev()
        .take(3)
        .any(|w| NEGATIONS.contains(&w))
}

/// The rest of the sentence after byte `end` of the lowercase copy, taken from the
/// original text (same byte offsets: lowercasing ASCII keeps lengths; otherwise empty).
fn clause_after(text: &str, end: usize) -> &str {
    let Some(rest) = text.get(end..) else { return "" };
    let stop = rest.find(['.', '!', '?']).unwrap_or(rest.len());
    &rest[..stop]
}

fn quote(text: &str) -> String {
    format!("\"{}\"", truncate_chars(text.trim(), QUOTE_CHARS))
}

fn suffix(object: &str) -> String {
    if object.is_empty() { String::new() } else { format!(" {object}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{NpcInfo, PlayerInfo, TranscriptMessage};
    use chrono::Utc;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn conversation(lines: &[(Speaker, &str)]) -> ConversationEnded {
        ConversationEnded {
            schema_version: 1,
            conversation_id: Uuid::new_v4(),
            npc_id: Uuid::new_v4(),
            player_id: Uuid::new_v4(),
            npc: NpcInfo { name: "Brom".into(), role: Some("blacksmith".into()), factions: vec![] },
            player: PlayerInfo { name: "Aria".into(), factions: vec![] },
            location: None,
            started_at: Utc::now(),
            ended_at: Utc::now(),
            messages: lines
                .iter()
                .map(|(speaker, text)| TranscriptMessage { speaker: *speaker, text: text.to_string() })
                .collect(),
        }
    }

    #[test]
    fn empty_and_npc_only_transcripts_yield_nothing() {
        assert!(RulesExtractor::shared().extract(&conversation(&[])).is_empty());
        let npc_only = conversation(&[(Speaker::Npc, "Good morning."), (Speaker::Npc, "Fine weather today.")]);
        assert!(RulesExtractor::shared().extract(&npc_only).is_empty());
    }

    #[test]
    fn negated_threat_is_not_a_threat() {
        let memories =
            RulesExtractor::shared().extract(&conversation(&[(Speaker::Player, "Relax, I won't hurt you.")]));
        assert!(memories.iter().all(|m| !m.tags.contains(&"threat".to_string())), "{memories:?}");
    }

    #[test]
    fn non_ascii_and_long_lines_do_not_panic() {
        let long = "ä".repeat(5_000);
        let memories = RulesExtractor::shared().extract(&conversation(&[
            (Speaker::Player, &long),
            (Speaker::Player, "Ich schwöre, I promise I will return the ring über alles."),
            (Speaker::Player, "Don't tell anyone — ÄÖÜ the mayor hides gold ßß under the mill."),
        ]));
        for memory in memories {
            assert!(memory.content.chars().count() <= MAX_CONTENT_CHARS);
        }
    }

    #[test]
    fn two_hundred_messages_give_at_most_three_memories() {
        let mut lines = Vec::new();
        for _ in 0..100 {
            lines.push((Speaker::Player, "You fool! Or else I will burn your shop. I'll buy the sword for 50 gold."));
            lines.push((Speaker::Npc, "You saved my daughter, though."));
        }
        let memories = RulesExtractor::shared().extract(&conversation(&lines));
        assert_eq!(memories.len(), MAX_MEMORIES_PER_EXTRACTION);
        assert!(memories.windows(2).all(|w| w[0].importance >= w[1].importance), "most important first");
    }

    proptest! {
        #[test]
        fn arbitrary_transcripts_never_panic_and_stay_in_range(
            texts in proptest::collection::vec(".{0,300}", 0..30),
            player_first in any::<bool>(),
        ) {
            let lines: Vec<(Speaker, &str)> = texts
                .iter()
                .enumerate()
                .map(|(i, text)| (if (i % 2 == 0) == player_first { Speaker::Player } else { Speaker::Npc }, text.as_str()))
                .collect();
            let memories = RulesExtractor::shared().extract(&conversation(&lines));
            prop_assert!(memories.len() <= MAX_MEMORIES_PER_EXTRACTION);
            for memory in memories {
                prop_assert!(!memory.content.is_empty());
                prop_assert!(memory.content.chars().count() <= MAX_CONTENT_CHARS);
                prop_assert!((0.0..=MAX_EXTRACTED_IMPORTANCE).contains(&memory.importance));
                prop_assert!((0.0..=1.0).contains(&memory.emotional_intensity));
                prop_assert!(!memory.tags.is_empty());
            }
        }
    }

    #[test]
    fn a_vow_commits_only_when_it_binds_the_speaker_to_something() {
        let vow = |text: &str| {
            let lower = text.to_lowercase();
            let start = lower.find("i promise").or_else(|| lower.find("i swear")).expect("a vow");
            let which = if lower[start..].starts_with("i promise") { "i promise" } else { "i swear" };
            commits(&lower, start, which)
        };
        assert!(vow("I promise I will bring it back."));
        assert!(vow("I'll be back by noon, I promise."));
        assert!(vow("I promise not to tell."));
        assert!(vow("I swear to return it"));
        assert!(!vow("I swear this always happens."));
        assert!(!vow("I swear to god it was huge"));
        assert!(!vow("i swear i'm turning into my mother"));
        assert!(commits("you have my word", 0, "you have my word"));
    }

    #[test]
    fn fighting_talked_of_is_not_a_fight_that_happened() {
        let extractor = RulesExtractor::new();
        let talk = conversation(&[
            (Speaker::Player, "If bandits came I'd fight them alongside you."),
            (Speaker::Npc, "Let's hope it never comes to that."),
        ]);
        assert!(extractor.extract(&talk).iter().all(|m| !m.tags.contains(&"combat".to_string())));
        let fought = conversation(&[
            (Speaker::Player, "We fought the wolves together at the mill."),
            (Speaker::Npc, "Aye, you stood with me."),
        ]);
        assert!(extractor.extract(&fought).iter().any(|m| m.tags.contains(&"combat".to_string())));
    }
}
