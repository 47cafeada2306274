//! Working-memory summaries: the one-paragraph note that
//! ingest stores per conversation so the very next enrich call can mention it, before
//! extraction has produced long-term memories.

use std::borrow::Cow;

use crate::wire::{ConversationEnded, Speaker};

const ELLIPSIS: char = '…';
/// A quote shorter than this (one char plus the ellipsis) says nothing; drop it instead.
const MIN_QUOTE_CHARS: usize = 2;

/// A deterministic summary of at most `max_chars` chars, for example
/// `Aria spoke with Brom at Market Square (8 messages). Aria: "I need a sword." Brom: "Forty gold."`
///
/// It quotes the first player line and the last NPC line (blank lines skipped), with
/// whitespace collapsed so the summary stays one paragraph. When it is too long the
/// quotes are shortened first, sharing the room fairly and ending in "…"; quotes that
/// cannot keep at least one char are dropped (the NPC's first); as a last resort the
/// whole text is cut. Pass a conversation that is already PII-redacted: the summary
/// copies text verbatim.
pub fn summarize_conversation(conversation: &ConversationEnded, max_chars: usize) -> String {
    let player_name = collapse_whitespace(&conversation.player.name);
    let npc_name = collapse_whitespace(&conversation.npc.name);

    let message_count = conversation.messages.len();
    let message_noun = if message_count == 1 { "message" } else { "messages" };
    let location = conversation.location.as_deref().map(collapse_whitespace).filter(|location| !location.is_empty());
    let header = match location {
        Some(location) => {
            format!("{player_name} spoke with {npc_name} at {location} ({message_count} {message_noun}).")
        }
        None => format!("{player_name} spoke with {npc_name} ({message_count} {message_noun})."),
    };

    let first_player_line = conversation
        .messages
        .iter()
        .filter(|message| message.speaker == Speaker::Player)
        .map(|message| collapse_whitespace(&message.text))
        .find(|text| !text.is_empty());
    let last_npc_line = conversation
        .messages
        .iter()
        .rev()
        .filter(|message| message.speaker == Speaker::Npc)
        .map(|message| collapse_whitespace(&message.text))
        .find(|text| !text.is_empty());

    let mut quotes: Vec<Quote> = [(player_name, first_player_line), (npc_name, last_npc_line)]
        .into_iter()
        .filter_map(|(speaker, line)| line.map(|text| Quote { speaker, text }))
        .collect();

    let summary = fit_quotes(&header, &mut quotes, max_chars);
    let bounded = truncate_chars(&summary, max_chars).into_owned();
    debug_assert!(bounded.chars().count() <= max_chars);
    bounded
}

struct Quote {
    speaker: String,
    text: String,
}

impl Quote {
    /// Chars of ` Speaker: "` and the closing `"`.
    fn framing_chars(&self) -> usize {
        self.speaker.chars().count() + 5
    }
}

fn assemble(header: &str, quotes: &[Quote], quote_budgets: Option<&[usize]>) -> String {
    let mut summary = header.to_owned();
    for (index, quote) in quotes.iter().enumerate() {
        let text = match quote_budgets {
            Some(budgets) => truncate_chars(&quote.text, budgets[index]),
            None => Cow::Borrowed(quote.text.as_str()),
        };
        summary.push(' ');
        summary.push_str(&quote.speaker);
        summary.push_str(": \"");
        summary.push_str(&text);
        summary.push('"');
    }
    summary
}

/// Shortens, then drops, quotes until header and quotes fit in `max_chars`.
fn fit_quotes(header: &str, quotes: &mut Vec<Quote>, max_chars: usize) -> String {
    let full = assemble(header, quotes, None);
    if full.chars().count() <= max_chars {
        return full;
    }
    let header_chars = header.chars().count();
    while !quotes.is_empty() {
        let framing: usize = quotes.iter().map(Quote::framing_chars).sum();
        let available = max_chars.saturating_sub(header_chars + framing);
        if available >= MIN_QUOTE_CHARS * quotes.len() {
            let text_lengths: Vec<usize> = quotes.iter().map(|quote| quote.text.chars().count()).collect();
            let budgets = share_fairly(&text_lengths, available);
            return assemble(header, quotes, Some(&budgets));
        }
        quotes.pop();
    }
    header.to_owned()
}

/// Splits `available` chars among texts of the given lengths: texts shorter than an
/// equal share keep their length, the others split what is left equally (earlier
/// texts get the odd char).
fn share_fairly(text_lengths: &[usize], available: usize) -> Vec<usize> {
    let mut budgets = vec![0; text_lengths.len()];
    let mut unsettled: Vec<usize> = (0..text_lengths.len()).collect();
    let mut remaining = available;
    loop {
        if unsettled.is_empty() {
            return budgets;
        }
        let share = remaining / unsettled.len();
        let (fits, too_long): (Vec<usize>, Vec<usize>) =
            unsettled.iter().partition(|&&index| text_lengths[index] <= share);
        if fits.is_empty() {
            let mut odd_chars = remaining % too_long.len();
            for index in too_long {
                budgets[index] = share + usize::from(odd_chars > 0);
                odd_chars = odd_chars.saturating_sub(1);
            }
            return budgets;
        }
        for index in fits {
            budgets[index] = text_lengths[index];
            remaining -= text_lengths[index];
        }
        unsettled = too_long;
    }
}

/// `text` cut to at most `max_chars` chars (not bytes), ending in "…" when cut.
/// Trailing whitespace before the ellipsis is dropped. Borrowed when it already fits.
pub fn truncate_chars(text: &str, max_chars: usize) -> Cow<'_, str> {
    // A char is at least one byte, so a short byte string needs no counting.
    if text.len() <= max_chars || text.chars().count() <= max_chars {
        return Cow::Borrowed(text);
    }
    if max_chars == 0 {
        return Cow::Borrowed("");
    }
    let kept_end = text.char_indices().nth(max_chars - 1).map_or(text.len(), |(byte_index, _)| byte_index);
    let mut truncated = text[..kept_end].trim_end().to_owned();
    truncated.push(ELLIPSIS);
    Cow::Owned(truncated)
}

/// Trims and turns every run of whitespace (newlines included) into one space.
fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{NpcInfo, PlayerInfo, TranscriptMessage};
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    fn line(speaker: Speaker, text: &str) -> TranscriptMessage {
        TranscriptMessage { speaker, text: text.to_owned() }
    }

    fn conversation(location: Option<&str>, messages: Vec<TranscriptMessage>) -> ConversationEnded {
        let at = DateTime::<Utc>::from_timestamp(1_750_000_000, 0).expect("valid timestamp");
        ConversationEnded {
            schema_version: 1,
            conversation_id: Uuid::from_u128(1),
            npc_id: Uuid::from_u128(2),
            player_id: Uuid::from_u128(3),
            npc: NpcInfo { name: "Brom".into(), role: Some("blacksmith".into()), factions: vec![] },
            player: PlayerInfo { name: "Aria".into(), factions: vec![] },
            location: location.map(str::to_owned),
            started_at: at,
            ended_at: at,
            messages,
        }
    }

    fn market_scene() -> ConversationEnded {
        conversation(
            Some("Market Square"),
            vec![
                line(Speaker::Player, "  I need a sword.  "),
                line(Speaker::Npc, "What kind?"),
                line(Speaker::Player, "A sharp one."),
                line(Speaker::Npc, "Forty gold,\n no haggling."),
            ],
        )
    }

    #[test]
    fn quotes_first_player_line_and_last_npc_line() {
        assert_eq!(
            summarize_conversation(&market_scene(), 500),
            "Aria spoke with Brom at Market Square (4 messages). \
             Aria: \"I need a sword.\" Brom: \"Forty gold, no haggling.\""
        );
    }

    #[test]
    fn location_and_missing_sides_are_optional() {
        let one_line = conversation(None, vec![line(Speaker::Player, "Hello?")]);
        assert_eq!(summarize_conversation(&one_line, 500), "Aria spoke with Brom (1 message). Aria: \"Hello?\"");
        let npc_only = conversation(Some("   "), vec![line(Speaker::Npc, "Begone."), line(Speaker::Player, "  ")]);
        assert_eq!(summarize_conversation(&npc_only, 500), "Aria spoke with Brom (2 messages). Brom: \"Begone.\"");
    }

    #[test]
    fn long_quotes_are_shortened_fairly() {
        let scene =
            conversation(Some("Forge"), vec![line(Speaker::Player, &"a".repeat(300)), line(Speaker::Npc, "Short.")]);
        let summary = summarize_conversation(&scene, 120);
        assert_eq!(summary.chars().count(), 120);
        assert!(summary.ends_with("Brom: \"Short.\""), "{summary}");
        assert!(summary.contains("aaa…\""), "{summary}");

        let both_long =
            conversation(None, vec![line(Speaker::Player, &"p".repeat(300)), line(Speaker::Npc, &"n".repeat(300))]);
        let summary = summarize_conversation(&both_long, 100);
        assert_eq!(summary.chars().count(), 100);
        let quoted: Vec<&str> = summary.split('"').collect();
        let player_quote_chars = quoted[1].chars().count();
        let npc_quote_chars = quoted[3].chars().count();
        assert!(player_quote_chars.abs_diff(npc_quote_chars) <= 1, "{summary}");
        assert!(quoted[1].ends_with('…') && quoted[3].ends_with('…'), "{summary}");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let scene = conversation(
            Some("Café"),
            vec![line(Speaker::Player, &"ü".repeat(200)), line(Speaker::Npc, &"日本".repeat(100))],
        );
        for max_chars in [0, 1, 5, 30, 47, 60, 61, 62, 63, 80, 150, 1000] {
            let summary = summarize_conversation(&scene, max_chars);
            assert!(summary.chars().count() <= max_chars, "{max_chars}: {summary}");
        }
    }

    #[test]
    fn quotes_are_dropped_when_nothing_of_them_fits() {
        let header = "Aria spoke with Brom at Market Square (4 messages).";
        let summary = summarize_conversation(&market_scene(), header.chars().count() + 3);
        assert_eq!(summary, header);
        let cut = summarize_conversation(&market_scene(), 10);
        assert_eq!(cut, "Aria spok…");
    }

    #[test]
    fn summaries_are_deterministic() {
        assert_eq!(summarize_conversation(&market_scene(), 90), summarize_conversation(&market_scene(), 90));
    }

    #[test]
    fn truncate_chars_counts_chars() {
        assert_eq!(truncate_chars("hello", 5), "hello");
        assert!(matches!(truncate_chars("hello", 5), Cow::Borrowed(_)));
        assert_eq!(truncate_chars("hello", 4), "hel…");
        assert_eq!(truncate_chars("héllo wörld", 7), "héllo…");
        assert_eq!(truncate_chars("日本語テキスト", 3), "日本…");
        assert_eq!(truncate_chars("abc", 1), "…");
        assert_eq!(truncate_chars("abc", 0), "");
        assert_eq!(truncate_chars("", 0), "");
    }

    #[test]
    fn share_fairly_gives_short_texts_their_length() {
        assert_eq!(share_fairly(&[300, 6], 50), [44, 6]);
        assert_eq!(share_fairly(&[300, 300], 51), [26, 25]);
        assert_eq!(share_fairly(&[3, 300], 51), [3, 48]);
        assert_eq!(share_fairly(&[], 51), Vec::<usize>::new());
    }
}
