//! Events: what happened between the player and the NPC in this conversation, each only
//! where a sentence carries the evidence, with who did it to whom and how severe it was.

use regex::Regex;

use super::lexicon::{ENEMIES, ITEM_ADJECTIVES, ITEMS};
use super::text::Sentence;
use super::{Finding, Kind, N, P, Party, Scene, Severity, compile, negated, quote};
use crate::memory::EmotionalValence;
use crate::wire::Speaker;

mod deeds;
mod trade;
mod words;
mod wrongs;

pub(crate) use words::commits;

const NUMBER: &str = "\\d{1,6}|a hundred|a thousand|one|two|three|four|five|six|seven|eight|nine|ten|eleven|\
                      twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|\
                      fifty|sixty|seventy|eighty|ninety|hundred|thousand";
const CURRENCY: &str = "gold|silver|copper|coppers|pennies|penny|pence|crowns?|marks?|coins?|farthings?|gp|sp|cp|\
                        shillings?|sovereigns?|ducats?|florins?|nobles?|groats?";
const INSULT_NOUNS: &[&str] = &[
    "fool",
    "idiot",
    "cheat",
    "cow",
    "hag",
    "oaf",
    "wretch",
    "scum",
    "pig",
    "swine",
    "rat",
    "liar",
    "fraud",
    "crook",
    "moron",
    "imbecile",
    "dimwit",
    "halfwit",
    "buffoon",
    "clown",
    "leech",
    "weasel",
    "snake",
    "worm",
    "cur",
    "knave",
    "varlet",
    "bastard",
    "git",
    "prat",
    "pillock",
    "twit",
    "numpty",
    "coward",
    "maggot",
    "toad",
    "slug",
    "lout",
    "dolt",
    "dunce",
    "lump",
    "lapdog",
    "lickspittle",
    "bootlicker",
    "toady",
    "wastrel",
    "layabout",
    "dullard",
    "nitwit",
    "blockhead",
    "numbskull",
    "scoundrel",
    "simpleton",
    "charlatan",
    "quack",
    "witch",
    "harpy",
    "shrew",
    "brute",
    "savage",
    "peasant",
    "wench",
    "trollop",
    "runt",
    "vermin",
    "filth",
    "thief",
    "swindler",
    "robber",
];
const INSULT_ADJECTIVES: &[&str] = &[
    "stupid",
    "useless",
    "worthless",
    "pathetic",
    "incompetent",
    "ignorant",
    "ugly",
    "disgusting",
    "slapdash",
    "cozening",
    "base",
    "fat",
    "lazy",
    "filthy",
    "thieving",
    "miserable",
    "wretched",
    "brainless",
    "witless",
    "gormless",
    "daft",
    "dumb",
    "vile",
    "loathsome",
    "foul",
    "worst",
    "pitiful",
    "feeble",
    "spineless",
    "gutless",
    "crooked",
    "idiotic",
    "moronic",
    "senile",
    "doddering",
    "hopeless",
    "dishonest",
    "greedy",
    "slimy",
];

pub(crate) struct Patterns {
    price: Regex,
    bare_amount: Regex,
    exchange_talk: Regex,
    accept: Regex,
    npc_pays: Regex,
    npc_agrees: Regex,
    buys: Regex,
    backs_out: Regex,
    haggling: Regex,
    player_sells: Regex,
    harm: Regex,
    harm_see: Regex,
    threat_phrase: Regex,
    deadly: Regex,
    insult_you: Regex,
    insult_work: Regex,
    insult_comparison: Regex,
    theft_admit: Regex,
    theft_from_npc: Regex,
    theft_excuse: Regex,
    theft_context: Regex,
    it_was_me: Regex,
    theft_caught: Regex,
    concede: Regex,
    deny: Regex,
    valuables: Regex,
    petty: Regex,
    betray_admit: Regex,
    betray_accuse: Regex,
    lie_owned: Regex,
    debt: Regex,
    exposed: Regex,
    vow: Regex,
    vow_past: Regex,
    commitment_excluded: Regex,
    commitment: Regex,
    solemn: Regex,
    livelihood: Regex,
    disaster: Regex,
    player_acted: Regex,
    hurt: Regex,
    yields: Regex,
    plan: Regex,
    secret_marker: Regex,
    confession_frame: Regex,
    confessed_deed: Regex,
    grave_deed: Regex,
    gift_marker: Regex,
    gift_excluded: Regex,
    gift_handed: Regex,
    gift_explicit: Regex,
    declines: Regex,
    help_done: Regex,
    help_is_done: Regex,
    for_the_npc: Regex,
    schooling: Regex,
    offers_help: Regex,
    help_npc: Regex,
    /// Thanks for a labour: "cheers for luggin' them sacks", "thank you for minding the stall".
    thanks_for_labour: Regex,
    /// What one thanks another for without it being a task done for them.
    not_a_labour: Regex,
    /// A task reported finished in a few words: "Rope's fixed.", "Patched the hull."
    task_reported: Regex,
    gratitude: Regex,
    deep_gratitude: Regex,
    rescue_npc: Regex,
    rescue_context: Regex,
    rescue_counterfactual: Regex,
    rescue_pulled: Regex,
    rescue_player: Regex,
    saved_trivial: Regex,
    combat_we: Regex,
    combat_said: Regex,
    against_npc: Regex,
    enemies_down: Regex,
    combat_context: Regex,
    hypothetical: Regex,
    laugh: Regex,
}

impl Patterns {
    pub fn new() -> Self {
        let enemies = ENEMIES.join("|");
        Self {
            price: compile(&format!(
                r"\b(?:({NUMBER})(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?\s*({CURRENCY})\b|a (copper|penny|crown|farthing|shilling|silver piece|gold piece))\b"
            )),
            bare_amount: compile(&format!(r"^(?:well,? |ok,? |alright,? |fine,? |yes,? )?({NUMBER})\b")),
            // Any amount but "one", which is mostly "no one" and "that one".
            exchange_talk: compile(&format!(
                r"\b(?:{}|{CURRENCY}|credits?|creds?|quid|bucks?|price|cost|costs|pay|paid|payment|charge|fee|sell|sold|buy|bought|deal|owe|worth|trade|barter|swap|agreed)\b",
                NUMBER.replace("|one|", "|")
            )),
            accept: compile(&format!(
                r"^(?:(?:{NUMBER}|that|then|very well|so be it|fine|alright|right)\b[^.!?]{{0,12}}\bit is\b|(?:[\w']+[.,!]? ){{0,3}}(?:done|deal|sold|agreed|sorted|it's a deal)\b)|\bi(?:'ll| will| shall) take (?:it|them|that|this|one|the \w+|a \w+)\b|\b(?:is|sounds|seems) fair\b|\bsits well\b|\bcount it\b|^(?:[a-z0-9]+[.,] )?take them\b|\bhere's (?:the |my |your )?(?:coin|money|payment|gold|silver|{NUMBER})\b"
            )),
            npc_agrees: compile(
                r"^(?:[a-z0-9']+[.,!]? ){0,3}(?:done|deal|agreed|sold)\b|\bit is\b|^(?:[a-z0-9']+ ){0,3}[a-z]+, then\b",
            ),
            buys: compile(
                r"\bi(?:'ll| will| shall) (?:buy|take) (?:it|them|the [a-z]+|a [a-z]+|two [a-z]+|three [a-z]+|some [a-z]+|one)\b(?: [a-z]+)?|\bi(?:'d| would) like to buy\b",
            ),
            haggling: compile(
                r"\b(?:robbery|too much|too expensive|haggle|final offer|that's me being generous|daylight robbery)\b",
            ),
            backs_out: compile(
                r"\b(?:too rich|too much|just looking|forget it|another day|no deal|never mind|not today|i'll pass|no thanks)\b",
            ),
            npc_pays: compile(
                r"\b(?:here(?:'s| is) your (?:coin|money|pay|silver|gold|payment|\w+)|the coin is received|i'll give you \w+ (?:silver|gold|copper)|take your coin)\b",
            ),
            player_sells: compile(
                r"\b(?:would you buy|will you buy|(?:do you|you) want to buy|buy (?:it|this|these|them) from me|i'll sell|i will sell|i want to sell|i'd like to sell|i have \w+ to sell|care to buy)\b",
            ),
            harm: compile(
                r"\b(?:i'll|i will|i shall|i'm going to|i am going to|i'm gonna|we'll|we will)(?:\s+[a-z']+){0,4}?\s+(?:kill|murder|burn|cut|gut|drown|hang|slaughter|break|hurt|end|skin|bury|smash|ruin|destroy|beat|stab|strangle|throttle|torch|flay|wreck|slit|choke|bleed|shoot|maim|finish|gouge)\b",
            ),
            harm_see: compile(
                r"\b(?:i'll|i will|i shall)\s+see\s+(?:you|your)\b[^.!?]*\b(?:drowned|hanged|hung|dead|revoked|seized|ruined|burned|burnt|whipped|flogged|irons|chains|gaol|jail|prison|flayed|buried|dangling|swinging|hanging|rotting|rot|bleeding|burning)\b",
            ),
            threat_phrase: compile(
                r"(?:\byour?\b|^(?:now[,.]? )?(?:give|hand|tell|open|get|pay|bring|do|stay|move|leave|shut|keep|stop)\b)[^.!?]*\bor else\W*$|\bor (?:else )?i(?:'ll| will)? (?:open|cut|gut|kill|break|burn|end|hurt|smash|wreck|torch) (?:you|every|all|both)\b|\b(?:before|'fore|fore) i lose (?:my|me) (?:patience|temper)\b|\bagain,? and (?:i'll|i will|i shall)\b[^.!?]*\b(?:you|your)\b|\b(?:nice|sweet|pretty|lovely|fine) (?:little )?(?:kid|girl|boy|daughter|son|wife|husband|family|shop|stall|place|forge|house|boat|mill|farm) (?:you(?:'ve)? got|you have)\b[^.!?]*\b(?:shame|pity|alone|own|careful|accident|happen)\b|\b(?:walks?|goes) home\b[^.!?]{0,30}\b(?:alone|on (?:her|his|their) own)\b|\b(?:you'll regret|you will regret|you'll be sorry|you will be sorry|watch your back|last warning|i know where you live|i (?:draw|drew|raise|point|level) my (?:sword|blade|dagger|knife|bow|crossbow|axe|pistol) (?:on|at) you|hand over your (?:purse|gold|coin|money|valuables)|you'll pay for (?:this|that)|you will pay for (?:this|that)|i'll make you pay|you'll wish you)\b|(?:^|, )(?:you're|you are) dead\b|\b(?:be|is) a (?:great |real |terrible |awful )?(?:pity|shame) if\b|^(?:a )?(?:shame|pity) if (?:your|you)\b|\bmay find (?:this|your|that)\b[^.!?]*\b(?:less safe|accident|burn|fire|strange)\b|\baccidents happen(?:\W*$|,| to (?:people|folk|those|them|the best))|\bfull of accidents\b|\bwater (?:tastes|tasteth) strange\b",
            ),
            deadly: compile(
                r"\b(?:kill|murder|dead|die|throat|drown|drowned|gut|hang|hanged|slaughter|burn|strangle|open you|irons|bury|buried|blood|bleed)\b",
            ),
            insult_you: compile(&format!(
                r"\byou(?:, [a-z]+,)?(?:'re| are)\s+(?:[a-z'-]+,?\s+){{0,6}}?(?:{}|{})\b",
                INSULT_NOUNS.join("|"),
                INSULT_ADJECTIVES.join("|")
            )),
            insult_comparison: compile(
                r"\b(?:a|an|my|any|i have seen|i've seen) (?:goats?|mules?|hens?|child|children|pigs?|dogs?|monkeys?|nan's|nan|granny|gran|grandmother|grandma|blind man|drunk|drunkard|donkey|ox|toddler|infant|swine)\b[^.!?]*\b(?:could|would|holds?|leaves?|makes?|leave)\b[^.!?]*\b(?:better|fairer|tidier|finer|cleaner|sharper|neater|tighter|straighter|done this)\b|\b(?:my (?:gran|granny|nan|grandmother|grandma|mother|mum|mam)|a child|a goat|pigs?|swine)\b[^.!?]*\b(?:better|tighter|finer|straighter|cleaner|sharper|faster|more sense)\b[^.!?]*\bthan (?:you|yours|this)\b|\b(?:you're|you are) (?:slower|dumber|uglier|lazier|thicker) than an? \b|\byou (?:fight|sing) like an? \b",
            ),
            insult_work: compile(
                r"^you (?:smell|stink|reek) (?:like an? |of )|\b(?:fit only for (?:swine|pigs|dogs|the dogs)|your (?:[a-z']+ ){0,2}(?:is|are) (?:rubbish|junk|garbage|trash|worthless|swill|slop|muck|filth|pig swill|an insult|a disgrace))\b",
            ),
            theft_admit: compile(
                r"^(?:yeah, |aye, |well, )?(?:stole|nicked|pinched|swiped|pocketed|filched|helped myself to|helped meself to)\b|\bi (?:stole|nicked|pinched|took (?:it|them|your|coin|money|the [a-z]+ from)|lifted|swiped|pocketed|filched|snatched|robbed|helped myself to|liberated)\b|\b(?:might've|might have) (?:liberated|borrowed|nicked|pinched)\b",
            ),
            theft_from_npc: compile(
                r"\bfrom (?:you|your)\b|\b(?:stole|nicked|pinched|swiped|pocketed|filched|took) your\b|\brobbed you\b|\bbefore you (?:noticed|missed (?:it|them)|found out|could notice)\b",
            ),
            theft_excuse: compile(
                r"\b(?:stole|nicked|pinched|took) your (?:idea|heart|line|joke|thunder|spot|seat|name|look|style|advice|word|point|class|suggestion|recommendation|lead)\b|\btook (?:a|the|my|our|his|her) (?:wrong|long|short|road|path|turn|nap|look|chance|ferry|boat|bath|walk|day|time|break|job|risk|stairs|left|right|seat|shot|liberty)\b",
            ),
            theft_context: compile(
                r"\b(?:missing|stolen|been at my|been at the|went missing|thief|thieving|the till|poor box|disappeared|vanished|lifted|nicked|gone from|is gone|are gone|'s gone|short this|walked off|there (?:were|was) more|no longer (?:on|in)|blamed the|left with (?:him|her|me|you))\b",
            ),
            it_was_me: compile(
                r"\b(?:that was me|it was me|it was i|that was i|i'm the one who|i was the one who)\b|^me\W*$",
            ),
            theft_caught: compile(
                r"(?:^|\bhands? )out of (?:the|my) (?:till|purse|pocket|box|drawer)|\b(?:turn(?:ing)? out your (?:[a-z']+ ){0,2}(?:sleeve|pockets?|bag|pack|purse)|empty your pockets|caught you (?:stealing|taking|with)|put it back|you stole|you've been stealing|you took my|you sold my|you nicked|you pinched|(?:you|you little|you dirty|you filthy|stop,?) thief|^thief)\b|\b(?:saw|watched) (?:it|that|you)\b[^.!?]*\b(?:up|into|in) your (?:sleeve|pocket|coat|bag|pack|cuff|shirt|boot|tunic|jerkin|apron)\b",
            ),
            concede: compile(
                r"^(?:\W*)(?:fine|very well|alright|all right|ok|okay|here|sorry|i'm sorry|forgive me|yes|i did|i know)\b|\bit must have\b|\b(?:won't|will not|shan't) happen again\b|\bnever again\b",
            ),
            deny: compile(r"\b(?:i didn't|i did not|i never|wasn't me|weren't me|search my|not me)\b"),
            valuables: compile(
                r"\b(?:brooch|jewel|jewels|emerald|ruby|diamond|sapphire|necklace|ring|gold|crown|relic)\b",
            ),
            petty: compile(r"\b(?:apples?|eggs?|bread|pie|pies|cabbages?|pennies|penny|loaf|cheese)\b"),
            betray_admit: compile(
                r"\bi (?:lied to you|lied about|deceived you|tricked you|betrayed you|broke my (?:word|promise|oath)|sold you out|should not have lied|shouldn't have lied|know i said i'd|know i promised|told you i'd [a-z']+ it because|never (?:meant|intended) to (?:pay|return|keep|bring))\b|\b(?:that was|it was) (?:untrue|a lie|false)\b|\bi let you (?:suspect|believe|think)\b|\btoo ashamed to tell you\b|\bi couldn't face telling you\b|\bi (?:couldn't|could not) bear to tell you\b|\bi told myself i'd\b[^.!?]*\bbefore you noticed\b",
            ),
            // "I'll work it off" repays only where something is owed.
            debt: compile(
                r"\b(?:owe|owed|owing|owes|debt|pay|paid|repay|coin|credit|cost|damage|broke|broken|smashed|wages)\b",
            ),
            lie_owned: compile(r"^(?:that was|it was) (?:untrue|a lie|false)$"),
            betray_accuse: compile(
                r"\byou did (?:swear|promise|give your word)\b|\byou (?:lied|swore|promised|told me you|said you'd|said you would|gave (?:me )?your word|sold me (?:out|for|to)|betrayed|deceived|tricked|cheated|painted)\b",
            ),
            exposed: compile(
                r"\b(?:never|lied|saw you|there is no|no such|been a week|instead|never arrived|never got|sold it|smashed|heard of you|open all night|you were at|fake|painted|yet the|and yet|now the)\b",
            ),
            vow: compile(
                r"\b(?:i promise|i swear|i vow|you have my word|i give you my (?:[a-z]+ )?word|swear (?:on|upon) my|cross my heart)|(?:^|[,;] )(?:upon|on) my (?:[a-z]+ )?(?:honour|honor|life|word|soul)\b|^my word\W*$",
            ),
            // Words about a vow, not one given to the listener ("I vow to myself" is a resolution).
            vow_past: compile(
                r"\b(?:gave|kept|broke|break|keep) my (?:[a-z]+ )?word\b|\bcan't promise\b|\bcannot promise\b|\b(?:vow|vowed|promise|promised|swear|swore) (?:to )?myself\b",
            ),
            // A commitment in form only: "bring it up" mentions, "find them out" learns,
            // "try and fix it" hedges.
            commitment_excluded: compile(
                r"\bbring (?:it|this|that|them)(?: back)? up\b|\bbring up\b|\bfind (?:it|them|him|her) out\b|\btry (?:and|to)\b",
            ),
            commitment: compile(
                r"\b(?:i'll|i will|i shall|i'm going to)\b[^.!?]{0,50}?\b(?:bring|pay (?:you|it) back|pay you by|repay|return (?:it|them|your|the [a-z]+ (?:to|by|before|tomorrow))|deliver|make it right|make it up to you|work it off|help you|fix (?:it|your|the)|mend|fetch|look after|watch over|send word|get (?:it|them) back|find (?:your|him|her|them))\b",
            ),
            solemn: compile(r"\b(?:honour|honor|life|soul|grave|solemn)\b"),
            livelihood: compile(
                r"(?:\b(?:(?:is|are|was|were) (?:all|everything) (?:i have|i've got|i had|we have|we've got)|everything (?:i've got|i have|i own))(?: in the world| left)?(?:\W*$|[,;:]| to live on)|\b(?:i'd be a beggar|we'd have starved)\b)",
            ),
            disaster: compile(
                r"\b(?:fire|flood|flooded|smoke|blaze|flames|burning|the water came|water kept coming|storm|wolves|avalanche|landslide|collapsed|caught)\b",
            ),
            player_acted: compile(
                r"\bthere you were\b|\byou (?:were|beat|came|put|got|drove|pulled|dragged|carried|fought|waded|climbed|ran|kept|held|brought)\b",
            ),
            hurt: compile(
                r"\b(?:my (?:arm|neck|nose|ribs|leg|jaw|head|teeth)!|can't breathe|agh|argh|ow|ouch|you broke my)\b",
            ),
            yields: compile(
                r"^(?:alright, alright, |all right, all right, |enough, )?(?:i yield|yield|you win|i give up|mercy)\b",
            ),
            plan: compile(
                r"\b(?:i'll|i will|i shall|i'm going to)\b|\b(?:won't|will not|shan't) happen again\b|^never again\b",
            ),
            secret_marker: compile(
                r"\b(?:never told (?:anyone|anybody|a living soul|a soul|no one|nobody)|don't tell (?:anyone|anybody|a soul|no one|nobody)|do not tell (?:anyone|anybody)|please don't (?:tell|say) (?:anything|nothing|anyone|a word)|keep (?:this|it) (?:quiet|secret|between us|to yourself)|between you and me|(?:just|strictly|stays|stay|keep (?:it|this)) between us|^between us|(?:no soul|no one|nobody|none) knows? (?:it |this )?(?:but|save|except) you|^(?:and )?(?:nobody|no one) else\W*$|can i tell you (?:something|a secret)|tell you a secret|something i have never told|one person to know|your silence|tell no one|(?:nobody|no one) else knows|(?:i have|i've) told no (?:one|living soul)|told no living soul|between you an' me)\b",
            ),
            confession_frame: compile(
                r"\b(?:unburden|weight upon me|must confess|have to confess|a confession|have to tell you something|need to tell you something|must tell you something)\b",
            ),
            confessed_deed: compile(
                r"\b(?:it was i (?:that|who)|i was the one who|it was me who|i (?:killed|slew|set (?:it|the fire|fire)|burned|burnt|murdered|poisoned|deserted|ran off from|ran away from))\b",
            ),
            grave_deed: compile(r"\b(?:slew|killed|murder|hang|hanged|deserted|set it|fire|dead|blood)\b"),
            gift_marker: compile(
                r"\b(?:(?:it's|it is|they're|they are|that one's|that's|this is|these are|all) (?:all )?(?:yours|for you)|(?:is|are) for you|no charge|free of charge|freely given|a (?:gift|present|token) for you|(?:it's|it is) a (?:gift|present)|my gift to you|i (?:bring|brought) you|consider (?:it|them) yours|(?:hear of|talk of|hear no talk of) payment|put your purse away)\b|^for you\b",
            ),
            declines: compile(
                r"^(?:no|nay)\b|^keep (?:your|it|them)\b|\bi (?:cannot|can't|couldn't) (?:accept|take)\b",
            ),
            gift_explicit: compile(r"\b(?:gift|present|free|no charge|freely|token)\b"),
            gift_handed: compile(
                r"^(?:here[,.]? |please[,.]? |go on[,.]? |now[,.]? )?(?:take|keep) (?:it|this|these|them|the [a-z]+)\b",
            ),
            gift_excluded: compile(
                r"\b(?:back|make it right|make amends|for my|gift for (?:my|his|her|their)|take (?:the|a) (?:road|path|left|right|turn|seat|stairs|long|short|lane|bridge|ford)|take it easy|take care|take your time|take it from|keep it (?:up|going|simple|real|in mind|down|quiet|clean|together)|keep (?:it|this|them|the [a-z]+) (?:[a-z]+ed|shut|open|safe|dry|clean|warm|tight|in|on|out|away|up|down)|next time)\b",
            ),
            help_done: compile(
                r"\b(?:i(?:'ve| have)?|we(?:'ve| have)?)\s+(?:just\s+|already\s+|finally\s+|also\s+)?(?:delivered|brought|carried|fixed|repaired|mended|swept|washed|cleared|hauled|finished|completed|fetched|returned|put in|chopped|stacked|fed|watered|cleaned|patched|dug|gathered|collected|boiled|healed|bound|stitched|found your|got your|built|milked|herded|rounded up|carried up)\b",
            ),
            help_is_done: compile(
                r"\b(?:is|are|it's) (?:all )?done\b|\bthe last of the\b|^done\b|\bas you asked\b|^got (?:her|him|it)\b",
            ),
            offers_help: compile(
                r"\b(?:let me|i'll|i will|i can|i could|here|allow me|i've|i have|i did|i drove|i brought)\b",
            ),
            schooling: compile(r"\b(?:class|classes|school|homework|semester|exam|test|finals|shift|day|week|chat)\b"),
            for_the_npc: compile(
                r"\b(?:your|for you|you asked|the last of|(?:it|them) (?:out|back|up|down)|all of (?:it|them)|every (?:one|single one))\b",
            ),
            help_npc: compile(
                r"\bthank(?:s| you) for (?:the |your )?help(?:ing)?\b|\byou (?:washed|did|fixed|went|brought|carried|mended|cleared|found|repaired|delivered|hauled|finished|swept|fetched) (?:all|the|every|my|them)\b|\byou've done (?:all|so much|more for|the work|it all|me)\b|\byou (?:sat|stayed) up\b[^.!?]*\b(?:night|hours)\b|\byou spent the (?:whole|entire)\b[^.!?]*\b(?:mending|fixing|counting|carrying|cleaning|helping)\b|\bthe work of (?:two|three|four|ten|a dozen)\b|\byou(?:'ve| have)? (?:[a-z]+ed|ran|did|took|kept|made|got|dug|fed|built|swept|sat|stood|held|spoke|speak|tell|told|put|found|brought|caught|gave|drove|wrote|read|won|paid|sorted|sewed|sewn) [^.!?]{0,40}\bfor (?:me|us|my)\b|\bsince you (?:were (?:up|down|out|in|on|here|there)|fixed|mended|patched|cleared|repaired|sorted|came)\b|\byou were (?:up|out|down|in|at)\b[^.!?]{0,40}\b(?:all (?:day|night|afternoon|morning|evening|week)|(?:two|three|four|five|six|seven) (?:days|nights|hours))\b|^you found [a-z]+\W*$",
            ),
            thanks_for_labour: compile(
                r"\b(?:thanks|thank you|thank ye|thankee|cheers|ta|obliged|grateful)(?: (?:so|very|again|much|kindly|mate|lad|lass|friend))* for (?:all )?(?:your )?((?:carry|lug|haul|mind|fix|mend|patch|fetch|deliver|chop|stack|dig|gather|feed|water|sweep|scrub|clean|clear|repair|build|sew|stitch|herd|guard|cover|tend|copy|translat|splic|seal|tarr?|caulk|muck|shoe|round|plough|plow|harvest|pick|load|unload|haul|run|driv|walk|look|keep|stand|sit|watch|lend|pitch|track|hunt|find)[a-z]*(?:ing|in'))\b",
            ),
            not_a_labour: compile(r"^(?:looking|keeping|standing|sitting|watching|walking|running|picking|finding)$"),
            task_reported: compile(
                r"^(?:(?:the|your|my|that|this|all|both|every) )?(?:[a-z-]+ ){0,2}[a-z-]+(?:'s|'re| is| are) (?:all |now |back |finally |properly )?(?:fixed|mended|patched|mapped|cleared|stacked|swept|fed|watered|sealed|shod|tarred|repaired|delivered|stocked|mucked out|back on|seen to|taken care of)\b[^?]*$|^(?:just |all )?(?:fixed|patched|mended|cleared|stacked|swept|repaired|delivered|sealed|tarred|stitched|hauled|fetched|mapped|shod|caulked|chopped|mucked out)\b (?:the|your|her|his|them|it|all|every)\b[^?]*$",
            ),
            gratitude: compile(
                r"\b(?:thank|thanks|thankee|in your debt|obliged|bless you|great service|owe you|grateful|much appreciated|you've done|you have done|the work of|good lad|good lass|good work|saved me a trip|saved my neck|cheers|your doing|owe you much|treasure|you're the best|you are the best|make me cry|what would i do without you|don't know what i'd have done|bless your)\b",
            ),
            deep_gratitude: compile(r"\b(?:in your debt|great service|the work of|i owe you|all my heart|truly)\b"),
            rescue_npc: compile(
                r"\b(?:you saved|you rescued|you pulled me out|your hand had my|owe you my (?:life|leg|neck|skin|hide)|(?:has|have) my life|not a moment too soon|another (?:breath|moment|minute|second|heartbeat) and|(?:i'd|i would) (?:be dead|have died|have drowned|have burned)[^.!?]*\b(?:without you|if not for you|if you hadn't|had you not)|(?:i had not|i'd not have|i would not have|i'd never have) (?:lived|survived)[^.!?]*\b(?:without you|if not for you|if you hadn't|had you not)|another (?:few )?(?:breaths?|moments?|minutes?|seconds?|heartbeats?) and (?:i'd|i would|we'd|he'd|she'd|they'd) (?:be|have)|how you carried (?:her|him|them|me)|saved (?:my|our) (?:life|lives|family|daughter|son|wife|husband|children|farm|home|shop|forge|livelihood|flock|boy|girl)|every [a-z]+, every [a-z]+,? saved)\b",
            ),
            rescue_counterfactual: compile(
                r"\b(?:if you hadn't|had you not|hadn't you|had you tarried)\b[^.!?]*\b(?:i'd|i would|i should|i had|we'd|she'd|he'd|they'd|i'd have)\b",
            ),
            rescue_pulled: compile(
                r"\byou (?:came|climbed|swam|ran|crawled|waded) [^.!?]{0,40}\band (?:got|grabbed|caught|pulled|fetched|drew) (?:me|her|him|them)\b|\byou (?:did )?(?:went in after me|go in after me|got a (?:fist|hand) in my|caught my (?:collar|wrist|arm|hand)|(?:pulled|hauled|dragged|drew|fished|carried) (?:me|her|him|them|my [a-z]+) (?:out|back|forth|up|free|clear|ashore|from))",
            ),
            rescue_context: compile(
                r"\b(?:thanks to you|because of you)\b[^.!?]*|\b(?:alive|i'll live|breathing|you're safe|they're safe)\b",
            ),
            rescue_player: compile(
                r"\bi (?:saved|rescued|pulled|dragged|carried) (?:you|your|him|her|them|the)\b[^.!?]{0,40}\b(?:out|from|to safety|home|ashore|free)\b",
            ),
            saved_trivial: compile(
                r"\bsaved me (?:a|the|some) (?:trip|walk|bother|seat|coin|time|money|fortune|journey|job)\b|\bwithout (?:him|her|them)\b",
            ),
            combat_we: compile(
                r"\bwe (?:fought|battled|beat them|killed|slew|drove (?:them|it) off|routed|held (?:them|the))\b|\bfought (?:beside|alongside|with) (?:you|me|anyone|him|her|each other)\b|\b(?:fought|stood) (?:at|by) (?:your|my) side\b",
            ),
            combat_said: compile(
                r"\byou (?:took|killed|slew|cut down|felled|dropped|stuck|bested|fought) (?:both|all of them|them all|the (?:big|biggest|last|first|other|grey|black) one|three|two|four|five|him|those)\b|\byou (?:killed|slew|felled|stuck|fought) (?:the|them|every)\b|\byou held (?:the|your) (?:gate|line|bridge|wall|door|ground|left|right|flank)\b|\bif you hadn't held\b|\byou (?:have |has )?bested me\b|\bthe duel\b[^.!?]*\b(?:fair|won|win|lost)\b|\bi swung at you\b|\bswung at me\b",
            ),
            against_npc: compile(
                r"\b(?:swung at you|swung at me|bested me|the duel|split lip|you hit me|i hit you|blade from my hand|laid you out|laid me out|knocked you (?:out|down|flat|cold)|knocked me (?:out|down|flat|cold)|put you on your back|you broke my (?:nose|jaw|arm|teeth))\b",
            ),
            enemies_down: compile(&format!(
                r"\b(?:{enemies}) (?:dead|slain)\b|\b(?:two|three|four|five|six|seven|eight|nine|ten) (?:{enemies} )?(?:down|dead)\b|\b\d+ (?:{enemies}) (?:down|dead)\b|^(?:that's|that is) the last of (?:them|'em)\b|\byou (?:cracked|decked|floored|thrashed) me\b|\bi (?:drove off|fought off|chased off|killed|slew|routed) the (?:{enemies})\b[^.!?]*\b(?:your|you)\b"
            )),
            combat_context: compile(&format!(
                r"\b(?:sword|blade|axe|hammer|spear|bow|shield|blood|wound|wounded|scratch|bitten|hurt|lip|bruise|swung|struck|duel|gate|dead|throat|drew|mist|{enemies})\b"
            )),
            hypothetical: compile(r"^(?:if|should|were|had)\b|\b(?:i'd|would|could|might)\b"),
            laugh: compile(r"^(?:\W*)(?:ha|haha|hah|heh|lol|i'd like to see you try)\b"),
        }
    }

    /// Every event the scene carries evidence of, at most one per kind.
    pub fn detect(&self, scene: &Scene<'_>) -> Vec<Finding> {
        let trade = self.trade(scene);
        let theft = self.theft(scene);
        let rescue = self.rescue(scene);
        let gift = if theft.is_none() { self.gift(scene, trade.is_some()) } else { None };
        // Help beside a gift or a rescue only where another sentence carries it: the
        // sentence that hands over a gift or tells a rescue is not also a favour.
        let help = self.help(scene).filter(|help| {
            [&rescue, &gift].into_iter().flatten().all(|other| other.evidence != help.evidence) && rescue.is_none()
        });
        let secret = if theft.is_none() { self.secret(scene) } else { None };
        let combat = self.combat(scene, rescue.is_some());
        [
            rescue,
            self.betrayal(scene),
            theft,
            self.threat(scene),
            secret,
            combat,
            help,
            gift,
            self.promise(scene),
            self.insult(scene),
            trade,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The other side laughed the line off: banter, not a threat.
    fn laughed_off(&self, scene: &Scene<'_>, index: usize) -> bool {
        scene.reply_to(index).next().is_some_and(|reply| self.laugh.is_match(&reply.plain))
    }

    fn player_sentences<'s, 'a>(scene: &'s Scene<'a>) -> impl Iterator<Item = (usize, &'s Sentence<'a>)> {
        scene.sentences.iter().enumerate().filter(|(_, s)| s.by(Speaker::Player) && !s.reported)
    }

    fn npc_sentences<'s, 'a>(scene: &'s Scene<'a>) -> impl Iterator<Item = (usize, &'s Sentence<'a>)> {
        scene.sentences.iter().enumerate().filter(|(_, s)| s.by(Speaker::Npc) && !s.reported)
    }

    fn found(pattern: &Regex, sentence: &Sentence<'_>) -> bool {
        pattern.find_iter(&sentence.plain).any(|m| !negated(&sentence.plain, m.start()))
    }
}

impl Patterns {
    /// The event the learned reader found in the sentence at `index`, told as the
    /// patterns tell it, with severity and sides read off the scene as they are; none
    /// where the sentence quotes someone else or the other side laughed it off.
    pub(crate) fn event_read(&self, scene: &Scene<'_>, kind: Kind, index: usize) -> Option<Finding> {
        let sentence = &scene.sentences[index];
        // Threats, insults, vows and confidences are the player's own words.
        let players_words = matches!(kind, Kind::Threat | Kind::Insult | Kind::Promise | Kind::Secret);
        if sentence.reported || self.laughed_off(scene, index) || (players_words && !sentence.by(Speaker::Player)) {
            return None;
        }
        // Whether the sentence's message says one of `words`.
        let message_says = |words: &[&str]| {
            scene
                .sentences
                .iter()
                .filter(|other| other.message == sentence.message)
                .any(|other| other.words().any(|word| words.contains(&word)))
        };
        // A good turn the NPC tells is the player's only where its message speaks to them
        // ("you pulled me out"), not of someone else ("the smith's boy pulled me out").
        let good_turn = matches!(kind, Kind::Help | Kind::Gift | Kind::Rescue | Kind::Combat);
        if good_turn && sentence.by(Speaker::Npc) && !message_says(&["you", "you're", "you've", "you'd", "you'll"]) {
            return None;
        }
        // A threat or an insult is aimed at the NPC: the player's message speaks to it
        // ("The muscular man talked carefully." threatens nobody).
        const TO_YOU: [&str; 18] = [
            "you", "your", "yours", "yourself", "you're", "you've", "you'd", "you'll", "u", "ur", "ye", "thee", "thou",
            "thy", "thine", "thyself", "ya", "yer",
        ];
        if matches!(kind, Kind::Threat | Kind::Insult) && !message_says(&TO_YOU) {
            return None;
        }
        // A vow or a confidence is the speaker's own: the message says "I" or "we".
        const OF_ME: [&str; 18] = [
            "i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself", "we", "we're", "we've", "we'll", "us",
            "our", "im", "ive", "ill",
        ];
        if matches!(kind, Kind::Promise | Kind::Secret) && !message_says(&OF_ME) {
            return None;
        }
        // A trade is an exchange: something in the scene is priced, paid or bargained for
        // ("Here." beside a cloak handed over freely buys nothing).
        if kind == Kind::Trade && !self.exchange_talk.is_match(&scene.plain) {
            return None;
        }
        let said = quote(sentence.text);
        let whole = &scene.plain;
        let against_npc = kind == Kind::Combat && self.against_npc.is_match(whole);
        let (statement, severity) = match kind {
            Kind::Trade => (format!("{P} traded with {N}: {said}"), Severity::Minor),
            Kind::Gift => (format!("{P} gave {N} a gift: {said}"), Severity::Minor),
            Kind::Help => (format!("{P} helped {N}: {said}"), Severity::Minor),
            Kind::Combat if against_npc => (format!("{P} fought {N}: {said}"), Severity::Moderate),
            Kind::Combat => (format!("{P} fought for {N}: {said}"), Severity::Moderate),
            Kind::Rescue => (format!("{P} rescued {N}: {said}"), Severity::Severe),
            Kind::Threat => {
                let deadly = self.deadly.is_match(&sentence.plain);
                (format!("{P} threatened {N}: {said}"), if deadly { Severity::Severe } else { Severity::Moderate })
            }
            Kind::Insult => (format!("{P} insulted {N}: {said}"), Severity::Minor),
            Kind::Theft => (format!("{P} stole from {N}: {said}"), self.theft_severity(whole)),
            Kind::Betrayal => (format!("{P} broke faith with {N}: {said}"), Severity::Moderate),
            Kind::Promise => (format!("{P} promised {N}: {said}"), Severity::Moderate),
            _ => (format!("{P} confided a secret to {N}: {said}"), Severity::Moderate),
        };
        Some(Finding {
            kind,
            actor: Party::Player,
            target: Some(if kind == Kind::Combat && !against_npc { Party::Other } else { Party::Npc }),
            severity,
            evidence: sentence.text.to_string(),
            content: String::new(),
            statement,
            topics: Vec::new(),
            valence: against_npc.then_some(EmotionalValence::Negative),
        })
    }
}
