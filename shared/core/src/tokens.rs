//! Token counts by a real BPE tokenizer (OpenAI's `cl100k_base`, bundled with the crate,
//! so it works offline). Budgets reserve with these counts and settle with what the
//! provider reports, so a different tokenizer on the provider's side only shifts the
//! settlement, never the accounting.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use crate::extraction::prompt::{ChatMessage, ChatRole};

/// OpenAI's chat format spends about this many tokens per message on role and
/// separators, plus [`REPLY_PRIMING_TOKENS`] once to prime the reply.
pub const TOKENS_PER_MESSAGE: usize = 4;
pub const REPLY_PRIMING_TOKENS: usize = 3;

/// Tokens in `text` (special-token markers count as plain text: the text is data).
pub fn count_tokens(text: &str) -> usize {
    // Loaded on first use, then shared by every thread.
    tiktoken_rs::cl100k_base_singleton().count_ordinary(text)
}

/// [`count_tokens`], exactly, for text built from repeating pieces (prompt sections,
/// memory lines): the text is cut after each line break that a non-space character
/// follows — cl100k_base's pre-tokenizer never lets a piece cross such a cut, so the
/// count is the sum of the segments' counts — and each segment's count is remembered.
pub fn count_tokens_cached(text: &str) -> usize {
    // Per thread: no lock on the read path, which a busy enrich takes for every line.
    thread_local! {
        static SEGMENTS: RefCell<HashMap<u64, usize>> = RefCell::new(HashMap::default());
        static HASHER: foldhash::quality::RandomState = foldhash::quality::RandomState::default();
    }
    const MAX_REMEMBERED: usize = 100_000;
    let mut total = 0;
    for segment in segments(text) {
        let key = HASHER.with(|state| state.hash_one(segment));
        total += SEGMENTS.with(|remembered| {
            if let Some(&count) = remembered.borrow().get(&key) {
                return count;
            }
            let count = count_tokens(segment);
            let mut remembered = remembered.borrow_mut();
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
            remembered.insert(key, count);
            count
        });
    }
    total
}

/// `text` cut after every `\n` followed by a character that is not whitespace.
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut from = 0;
        while let Some(offset) = rest[from..].find('\n') {
            let next = from + offset + 1;
            if rest[next..].chars().next().is_some_and(|c| !c.is_whitespace()) {
                let (segment, tail) = rest.split_at(next);
                rest = tail;
                return Some(segment);
            }
            from = next;
        }
        Some(std::mem::take(&mut rest))
    })
}

/// Tokens a chat request with these messages sends as its prompt.
pub fn count_chat_tokens(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .map(|message| {
            TOKENS_PER_MESSAGE
                + match message.role {
                    ChatRole::System => count_system_prompt(&message.content),
                    ChatRole::User | ChatRole::Assistant => count_tokens(&message.content),
                }
        })
        .sum::<usize>()
        + REPLY_PRIMING_TOKENS
}

/// The system prompt (with its few-shot examples, ~600 tokens) is the same on every
/// call: its count is remembered instead of re-encoded per conversation.
fn count_system_prompt(content: &str) -> usize {
    static LAST: Mutex<Option<(u64, usize)>> = Mutex::new(None);
    static HASHER: std::sync::LazyLock<foldhash::quality::RandomState> = std::sync::LazyLock::new(Default::default);
    let key = HASHER.hash_one(content);
    if let Some((cached_key, count)) = *LAST.lock().unwrap_or_else(|poison| poison.into_inner())
        && cached_key == key
    {
        return count;
    }
    let count = count_tokens(content);
    *LAST.lock().unwrap_or_else(|poison| poison.into_inner()) = Some((key, count));
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_the_published_cl100k_encoding() {
        // "hello world" is two tokens in cl100k_base; an empty string none.
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(count_tokens(""), 0);
        assert!(count_tokens("The blacksmith sold a longsword for 50 gold.") < 15);
    }

    #[test]
    fn chat_counts_add_the_per_message_overhead() {
        let messages = vec![
            ChatMessage { role: ChatRole::System, content: "hello world".into() },
            ChatMessage { role: ChatRole::User, content: String::new() },
        ];
        assert_eq!(count_chat_tokens(&messages), 2 + 2 * TOKENS_PER_MESSAGE + REPLY_PRIMING_TOKENS);
    }

    #[test]
    fn a_remembered_system_prompt_count_follows_its_content() {
        let system = |content: &str| vec![ChatMessage { role: ChatRole::System, content: content.into() }];
        let overhead = TOKENS_PER_MESSAGE + REPLY_PRIMING_TOKENS;
        assert_eq!(count_chat_tokens(&system("hello world")), 2 + overhead);
        assert_eq!(count_chat_tokens(&system("hello world")), 2 + overhead);
        assert_eq!(count_chat_tokens(&system("hello brave new world")), 4 + overhead);
    }

    #[test]
    fn cached_counts_equal_whole_counts() {
        let texts = [
            "You are Brom, the blacksmith. Personality: gruff.\nHow you see the player: friend (trustworthy).\n\nRelationship: Friend. You have neutral feelings toward them.\n\nYour memories of this player:\n📝 The player bought a steel sword for 50 gold. (3 days ago, ⭐⭐⭐)\n💡 The player often trades with me (4 times). (yesterday, ⭐⭐)\n\nStay in character.",
            "a\nb\n\n  c\n\td\n123\n'll\n.\n\n",
            "",
            "\n\n\nx",
            "line one.)\n\n- item\n- 42 items\n   \nend",
        ];
        for text in texts {
            assert_eq!(count_tokens_cached(text), count_tokens(text), "{text:?}");
            assert_eq!(count_tokens_cached(text), count_tokens(text), "again, from the cache: {text:?}");
        }
    }

    #[test]
    fn cached_counts_equal_whole_counts_on_random_texts() {
        let alphabet: Vec<char> = "ab Z9.,!?'-()⭐📝\n\n \t\r:".chars().collect();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..3_000 {
            let length = (state % 40) as usize;
            let text: String = (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(count_tokens_cached(&text), count_tokens(&text), "{text:?}");
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        }
    }

    #[test]
    fn special_token_text_is_counted_as_text() {
        assert!(count_tokens("<|endoftext|>") > 1);
    }
}
