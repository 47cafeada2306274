//! Token counts by a real BPE tokenizer (OpenAI's `cl100k_base`, bundled with the crate,
//! so it works offline). Budgets reserve with these counts and settle with what the
//! provider reports, so a different tokenizer on the provider's side only shifts the
//! settlement, never the accounting.

use crate::extraction::prompt::ChatMessage;

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
    messages.iter().map(|message| TOKENS_PER_MESSAGE + count_tokens(&message.content)).sum::<usize>()
        + REPLY_PRIMING_TOKENS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extraction::prompt::ChatRole;

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
    fn special_token_text_is_counted_as_text() {
        assert!(count_tokens("<|endoftext|>") > 1);
    }
}
