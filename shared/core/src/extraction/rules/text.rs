//! The transcript as the rules read it: each message cut into sentences, each sentence
//! with a plain lowercase copy in which archaic and chat spellings are brought to one
//! form ("thou art" → "you are", "ur" → "your", "nothin'" → "nothing"), so one pattern
//! covers every register. Quoted speech is marked, so a player repeating what a bandit
//! said is not taken for the player's own words.

use std::borrow::Cow;

use crate::wire::Speaker;

/// One sentence of one message.
#[derive(Debug)]
pub(crate) struct Sentence<'a> {
    pub speaker: Speaker,
    /// Index of its message in the transcript.
    pub message: usize,
    /// The sentence as written, trimmed.
    pub text: &'a str,
    /// Lowercase, spelling brought to one form, single spaces.
    pub plain: String,
    /// Holds quoted speech: someone else's words, reported.
    pub reported: bool,
}

impl Sentence<'_> {
    pub fn by(&self, speaker: Speaker) -> bool {
        self.speaker == speaker
    }

    pub fn words(&self) -> impl Iterator<Item = &str> {
        self.plain.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty())
    }

    pub fn word_count(&self) -> usize {
        self.words().count()
    }
}

/// The transcript cut into sentences, in order.
pub(crate) fn sentences<'a>(messages: impl Iterator<Item = (Speaker, &'a str)>) -> Vec<Sentence<'a>> {
    let mut out = Vec::new();
    for (message, (speaker, text)) in messages.enumerate() {
        let quoted = quoted_spans(text);
        for (start, piece) in split_sentences(text) {
            let end = start + piece.len();
            let reported = quoted.iter().any(|(from, to)| start < *to && *from < end);
            out.push(Sentence { speaker, message, text: piece, plain: plain(piece), reported });
        }
    }
    out
}

/// Byte ranges inside quotation marks: an opening mark after a space or the start and
/// before a capital letter, up to a closing mark after sentence punctuation.
fn quoted_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut open: Option<usize> = None;
    for (index, &(at, c)) in chars.iter().enumerate() {
        let is_mark = matches!(c, '\'' | '"' | '‘' | '’' | '“' | '”');
        if !is_mark {
            continue;
        }
        let before = index.checked_sub(1).map(|i| chars[i].1);
        let after = chars.get(index + 1).map(|(_, c)| *c);
        match open {
            None if before.is_none_or(char::is_whitespace) && after.is_some_and(char::is_uppercase) => {
                open = Some(at + c.len_utf8());
            }
            Some(from) if before.is_some_and(|b| matches!(b, '.' | '!' | '?' | ',')) => {
                spans.push((from, at));
                open = None;
            }
            _ => {}
        }
    }
    spans
}

/// Sentences with their byte offsets: cut after `.`, `!`, `?` or `…` followed by a space
/// (or a closing quotation mark and a space), never inside a word.
fn split_sentences(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if !matches!(c, '.' | '!' | '?' | '…') {
            continue;
        }
        let mut end = at + c.len_utf8();
        while let Some(&(next_at, next)) = chars.peek() {
            if !matches!(next, '.' | '!' | '?' | '…' | '\'' | '"' | '’' | '”') {
                break;
            }
            end = next_at + next.len_utf8();
            chars.next();
        }
        if chars.peek().is_none_or(|(_, next)| next.is_whitespace()) {
            push_piece(&mut out, text, start, end);
            start = end;
        }
    }
    push_piece(&mut out, text, start, text.len());
    out
}

fn push_piece<'a>(out: &mut Vec<(usize, &'a str)>, text: &'a str, start: usize, end: usize) {
    let Some(piece) = text.get(start..end) else { return };
    let trimmed = piece.trim_start();
    let offset = start + (piece.len() - trimmed.len());
    let trimmed = trimmed.trim_end();
    if trimmed.chars().any(char::is_alphanumeric) {
        out.push((offset, trimmed));
    }
}

/// Lowercase, one spelling per word, single spaces. Runs once per sentence of every
/// conversation, so it reuses its buffers instead of allocating per word.
pub(crate) fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut previous = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String, previous: &mut String| {
        if word.is_empty() {
            return;
        }
        let core = word.trim_start_matches('\'');
        let leading = &word[..word.len() - core.len()];
        let mapped = respell(word, core, previous);
        if mapped.is_none() && !leading.is_empty() {
            out.push_str(leading);
        }
        let replacement: Cow<'_, str> = mapped.unwrap_or(Cow::Borrowed(core.trim_end_matches('\'')));
        out.push_str(&replacement);
        if mapped_keeps_trailing_quote(word, &replacement) {
            out.push('\'');
        }
        previous.clear();
        previous.push_str(replacement.rsplit(' ').next().unwrap_or_default());
        word.clear();
    };
    let lowered = text.chars().flat_map(char::to_lowercase).map(|c| match c {
        '‘' | '’' | '`' => '\'',
        '“' | '”' => '"',
        c => c,
    });
    for c in lowered {
        if c.is_alphanumeric() || c == '\'' || (c == '-' && !word.is_empty()) {
            word.push(c);
        } else {
            flush(&mut word, &mut out, &mut previous);
            if c.is_whitespace() {
                if !out.ends_with(' ') && !out.is_empty() {
                    out.push(' ');
                }
            } else {
                out.push(c);
            }
        }
    }
    flush(&mut word, &mut out, &mut previous);
    // Spaces are only ever pushed after something, so only the end can need trimming.
    while out.ends_with(' ') {
        out.pop();
    }
    out
}

/// A word ending in a quotation mark that closes quoted speech ("you.'" is rare; "tryin'"
/// is a dropped g): the mark is kept only when it was not a dropped g.
fn mapped_keeps_trailing_quote(word: &str, replacement: &str) -> bool {
    word.ends_with('\'')
        && !word.ends_with("in'")
        && replacement.ends_with(|c: char| c.is_alphanumeric())
        && word.len() > 1
        && !matches!(word, "'em" | "em'")
}

/// The one spelling of an archaic or chat word, if it has another.
fn respell<'w>(word: &str, core: &'w str, previous: &str) -> Option<Cow<'w, str>> {
    let fixed = match word {
        "'tis" => "it is",
        "'twas" => "it was",
        "'twould" => "it would",
        "'twill" => "it will",
        "'em" => "them",
        _ => "",
    };
    if !fixed.is_empty() {
        return Some(Cow::Borrowed(fixed));
    }
    let core = core.trim_end_matches('\'');
    let simple = match core {
        "thou" | "thee" | "ye" | "u" | "ya" => "you",
        "yer" | "thy" | "ur" | "yor" => "your",
        "thine" => "yours",
        "art" if previous == "you" => "are",
        "hast" => "have",
        "hath" => "has",
        "didst" => "did",
        "dost" | "doth" => "do",
        "wilt" => "will",
        "shalt" => "shall",
        "wouldst" => "would",
        "couldst" => "could",
        "shouldst" => "should",
        "canst" => "can",
        "wert" => "were",
        "soldst" => "sold",
        "nay" => "no",
        "aye" => "yes",
        "mine" if previous == "upon" || previous == "on" => "my",
        "im" => "i'm",
        "ive" => "i've",
        "dont" => "don't",
        "didnt" => "didn't",
        "cant" => "can't",
        "wont" if previous == "i" || previous == "you" || previous == "they" || previous == "we" => "won't",
        "isnt" => "isn't",
        "wasnt" => "wasn't",
        "thats" => "that's",
        "whats" => "what's",
        "youre" => "you're",
        "youll" => "you'll",
        "ill" if previous.is_empty() => "i'll",
        "gimme" => "give me",
        "wanna" => "want to",
        "gonna" => "going to",
        "gotta" => "got to",
        "oughta" => "ought to",
        "cos" | "cuz" | "coz" => "because",
        "meself" | "mesel" => "myself",
        "r" => "are",
        "n" => "and",
        "ain't" => "isn't",
        "me" if previous == "pop" || previous == "in" => "my",
        _ => "",
    };
    if !simple.is_empty() {
        return Some(Cow::Borrowed(simple));
    }
    // A dropped g: "nothin'", "thievin'", "leavin'".
    if word.ends_with("in'") && core.len() > 3 {
        return Some(Cow::Owned(format!("{core}g")));
    }
    // Irregular archaic past forms.
    let irregular = match core {
        "hadst" => "had",
        "gavest" => "gave",
        "wast" => "was",
        "saidst" => "said",
        "madest" => "made",
        "tookest" => "took",
        "knewest" => "knew",
        "camest" => "came",
        "spake" => "spoke",
        "ere" => "before",
        _ => "",
    };
    if !irregular.is_empty() {
        return Some(Cow::Borrowed(irregular));
    }
    // "keepeth" → "keeps", "knoweth" → "knows"; "thou foughtest" → "you fought".
    if core.len() > 5 && core.ends_with("eth") && !matches!(core, "teeth" | "beneath" | "seventh" | "twentieth") {
        return Some(Cow::Owned(format!("{}s", &core[..core.len() - 3])));
    }
    if previous == "you" && core.len() > 5 && core.ends_with("est") && !matches!(core, "honest" | "forest" | "interest")
    {
        return Some(Cow::Borrowed(&core[..core.len() - 3]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archaic_and_chat_spellings_come_to_one_form() {
        assert_eq!(plain("Thou art a base and cozening hag!"), "you are a base and cozening hag!");
        assert_eq!(plain("'Twas I that set it."), "it was i that set it.");
        assert_eq!(plain("ur too kind, nothin' to it"), "your too kind, nothing to it");
        assert_eq!(plain("My father yet keepeth sheep"), "my father yet keeps sheep");
        assert_eq!(plain("Thou foughtest well"), "you fought well");
        assert_eq!(plain("I swear upon mine honour"), "i swear upon my honour");
        assert_eq!(plain("Thievin’ old cow."), "thieving old cow.");
        assert_eq!(plain("Take 'em."), "take them.");
    }

    #[test]
    fn messages_are_cut_into_sentences_and_quotes_are_marked() {
        let all = sentences(
            [(Speaker::Player, "Their leader said, 'Next time I'll gut you.' Charming fellow. Right?")].into_iter(),
        );
        let texts: Vec<&str> = all.iter().map(|s| s.text).collect();
        assert_eq!(texts, ["Their leader said, 'Next time I'll gut you.'", "Charming fellow.", "Right?"]);
        assert!(all[0].reported, "a sentence holding a quotation is someone else's words");
        assert!(!all[1].reported);
        let quoted = sentences([(Speaker::Player, "He said: 'I'll gut you. I mean it.' Nice.")].into_iter());
        assert!(quoted.iter().any(|s| s.text.starts_with("I mean it") && s.reported));
        assert!(quoted.iter().any(|s| s.text == "Nice." && !s.reported));
    }

    #[test]
    fn ellipses_and_decimals_do_not_cut_words() {
        let all = sentences([(Speaker::Npc, "I... yes. It cost 2.5 gold...Fine.")].into_iter());
        let texts: Vec<&str> = all.iter().map(|s| s.text).collect();
        assert_eq!(texts, ["I...", "yes.", "It cost 2.5 gold...Fine."]);
    }
}
