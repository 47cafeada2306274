//! Token counts by a real BPE tokenizer (OpenAI's `cl100k_base`, bundled with the crate,
//! so it works offline). Budgets reserve with these counts and settle with what the
//! provider reports, so a different tokenizer on the provider's side only shifts the
//! settlement, never the accounting.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use crate::extraction::prompt::{ChatMessage, ChatRole};

/// OpenAI's chat format spends about this many tokens per message on role and
/// separators, plus [`REPLY_PRIMING_TOKENS`] once to prime the reply.
pub const TOKENS_PER_MESSAGE: usize = 4;
pub const REPLY_PRIMING_TOKENS: usize = 3;

/// Tokens in `text` (special-token markers count as plain text: the text is data).
pub fn count_tokens(text: &str) -> usize {
    // Loaded on first use (~100 ms), then shared by every thread.
    tiktoken_rs::cl100k_base_singleton().count_ordinary(text)
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
    let mut hasher = DefaultHasher::new();
    content.hash(&mut hasher);
    let key = hasher.finish();
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
    fn special_token_text_is_counted_as_text() {
        assert!(count_tokens("<|endoftext|>") > 1);
    }
}
