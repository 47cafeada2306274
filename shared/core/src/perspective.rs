//! Who did what to whom, told from the side of whoever holds it.
//!
//! A memory's `statement` names the two parties of its conversation by placeholder:
//! `{player}` and `{npc}` ("{player} threatened {npc}: …"). Rendered for the NPC that lived
//! it, `{npc}` is "you" ("Aria threatened you"); for a listener who heard it from that
//! NPC, the teller is "they"/"them" ("Hale told you Aria threatened them"); for anyone
//! further along, the NPC is named ("Brom told you Aria threatened Hale"). The memory's
//! own `content` is the statement rendered for the NPC that lived it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub const PLAYER: &str = "{player}";
pub const NPC: &str = "{npc}";

/// The parties of a memory or fact and the statement of it, when known (memories
/// written before perspective was recorded, and an LLM's free text, have none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perspective {
    /// Who did it (the player's or the NPC's id), or none when someone else did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<Uuid>,
    /// To whom, or none when to someone else or to no one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_id: Option<Uuid>,
    /// The event or fact with `{player}` and `{npc}` for the two parties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The NPC who lived it, and the names to fill in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npc_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npc_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub player_name: Option<String>,
}

impl Perspective {
    pub fn is_empty(&self) -> bool {
        self == &Perspective::default()
    }
}

/// How sure a listener is of what it heard, in words.
pub fn belief(confidence: f64) -> &'static str {
    if confidence >= 0.7 {
        "you believe it"
    } else if confidence >= 0.4 {
        "you half believe it"
    } else {
        "you doubt it"
    }
}

/// `statement` with `{player}` as `player_name` and `{npc}` as seen by `holder`: "you"
/// when the holder lived it, "they"/"them" when the holder heard it from that NPC
/// (`teller`), else `npc_name`. A sentence that starts with a pronoun is capitalised.
pub fn render(
    statement: &str,
    player_name: &str,
    npc: Option<(Uuid, &str)>,
    holder: Uuid,
    teller: Option<Uuid>,
) -> String {
    let (npc_id, npc_name) = match npc {
        Some((id, name)) => (Some(id), name),
        None => (None, "someone"),
    };
    let seen_as = |subject: bool| -> String {
        if npc_id == Some(holder) {
            "you".to_owned()
        } else if npc_id.is_some() && npc_id == teller {
            if subject { "they".to_owned() } else { "them".to_owned() }
        } else {
            npc_name.to_owned()
        }
    };
    let mut out = String::with_capacity(statement.len() + 16);
    let mut rest = statement;
    while let Some(at) = rest.find('{') {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let subject = out.trim_end().is_empty() || out.trim_end().ends_with(['.', '!', '?', ':']);
        if let Some(after) = from.strip_prefix(NPC) {
            let word = seen_as(subject);
            out.push_str(&if subject { capitalise(&word) } else { word });
            rest = after;
        } else if let Some(after) = from.strip_prefix(PLAYER) {
            out.push_str(player_name);
            rest = after;
        } else {
            out.push('{');
            rest = &from[1..];
        }
    }
    out.push_str(rest);
    out
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// How a knowledge fact reads in its holder's prompt. The holder's own experience is its
/// memory's content, never hearsay; a fact heard from someone says who told it and how
/// far the holder believes it.
pub fn knowledge_line(
    holder: Uuid,
    content: &str,
    hop_count: i32,
    confidence: f64,
    perspective: &Perspective,
    teller: Option<(Uuid, &str)>,
) -> String {
    if hop_count == 0 {
        return content.to_owned();
    }
    let belief = belief(confidence);
    let told = match (&perspective.statement, &perspective.player_name) {
        (Some(statement), Some(player_name)) => {
            let npc = perspective.npc_id.map(|id| (id, perspective.npc_name.as_deref().unwrap_or("someone")));
            render(statement, player_name, npc, holder, teller.map(|(id, _)| id))
        }
        // Written before perspective was recorded: the first holder's words, quoted.
        _ => format!("\"{content}\""),
    };
    match teller {
        Some((_, name)) => format!("{name} told you {told} ({belief})"),
        None => format!("You heard that {told} ({belief})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_victim_the_listener_and_the_next_listener_each_read_it_from_their_side() {
        let (hale, brom, tobin) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let statement = "{player} threatened {npc}: \"I'll burn your post down.\"";
        let npc = Some((hale, "Hale"));
        assert_eq!(render(statement, "Aria", npc, hale, None), "Aria threatened you: \"I'll burn your post down.\"");
        assert_eq!(
            render(statement, "Aria", npc, brom, Some(hale)),
            "Aria threatened them: \"I'll burn your post down.\""
        );
        assert_eq!(
            render(statement, "Aria", npc, tobin, Some(brom)),
            "Aria threatened Hale: \"I'll burn your post down.\""
        );
        assert_eq!(
            render("{npc} promised {player}: \"x\"", "Aria", npc, brom, Some(hale)),
            "They promised Aria: \"x\""
        );
        assert_eq!(render("{npc} promised {player}", "Aria", npc, hale, None), "You promised Aria");
        assert_eq!(render("a {brace} stays", "Aria", npc, hale, None), "a {brace} stays");
    }

    #[test]
    fn a_heard_fact_names_its_teller_and_how_far_it_is_believed() {
        let (hale, brom, tobin) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let perspective = Perspective {
            actor_id: None,
            target_id: Some(hale),
            statement: Some("{player} threatened {npc}".into()),
            npc_id: Some(hale),
            npc_name: Some("Hale".into()),
            player_name: Some("Aria".into()),
        };
        let own = knowledge_line(hale, "Aria threatened you", 0, 0.6, &perspective, None);
        assert_eq!(own, "Aria threatened you", "an NPC's own experience is never hearsay");
        let heard = knowledge_line(brom, "Aria threatened you", 1, 0.5, &perspective, Some((hale, "Hale")));
        assert_eq!(heard, "Hale told you Aria threatened them (you half believe it)");
        let further = knowledge_line(tobin, "Aria threatened you", 2, 0.3, &perspective, Some((brom, "Brom")));
        assert_eq!(further, "Brom told you Aria threatened Hale (you doubt it)");
        let legacy = knowledge_line(tobin, "Aria threatened me", 2, 0.8, &Perspective::default(), Some((brom, "Brom")));
        assert_eq!(legacy, "Brom told you \"Aria threatened me\" (you believe it)");
    }
}
