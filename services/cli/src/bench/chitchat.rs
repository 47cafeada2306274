//! The BYU Chit-Chat Challenge corpus (MIT licence; shipped inside the `chitchat-dataset`
//! package on PyPI, fetched by `deploy/local/fetch-corpus`): real everyday two-person
//! chats, read here as conversations for counting false memories (`bench extract`) and
//! for training the extractor's reader.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct RawChat {
    #[serde(default)]
    start: Option<DateTime<Utc>>,
    messages: Vec<Vec<RawMessage>>,
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    text: String,
    #[serde(default)]
    timestamp: Option<DateTime<Utc>>,
    sender: String,
}

/// One chat, turns alternating (consecutive messages of one sender joined); each turn
/// says whether the player (the chat's first sender) said it.
#[derive(Debug, Clone)]
pub struct Session {
    pub turns: Vec<(bool, String)>,
}

/// The corpus's two-person chats in their file order (chat ids sorted), each as turns
/// whose first speaker plays the player: everyday talk for counting false memories.
pub fn everyday_chats(corpus: &[u8], limit: usize) -> anyhow::Result<Vec<Session>> {
    let chats: BTreeMap<String, RawChat> = serde_json::from_slice(corpus)?;
    Ok(chats
        .values()
        .filter_map(|chat| {
            let player = &chat.messages.first()?.first()?.sender;
            session(chat, player)
        })
        .filter(|session| session.turns.len() >= 2)
        .take(limit)
        .collect())
}

fn session(chat: &RawChat, player: &str) -> Option<Session> {
    let turns: Vec<(bool, String)> = chat
        .messages
        .iter()
        .filter_map(|turn| {
            let first = turn.first()?;
            let text = turn.iter().map(|m| m.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ");
            (!text.is_empty()).then(|| (first.sender == player, text))
        })
        .collect();
    // A chat with no time at all is left out, as it always was: the slices `bench extract`
    // counts are the same chats as before.
    chat.start.or_else(|| chat.messages.first()?.first()?.timestamp)?;
    (!turns.is_empty()).then_some(Session { turns })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORPUS: &str = r#"{
      "c1": {"start": "2018-05-01T10:00:00Z", "messages": [
        [{"text": "I adopted a puppy named Biscuit", "timestamp": "2018-05-01T10:00:05Z", "sender": "a"}],
        [{"text": "Puppies are adorable!", "timestamp": "2018-05-01T10:00:30Z", "sender": "b"},
         {"text": "What breed is Biscuit?", "timestamp": "2018-05-01T10:00:35Z", "sender": "b"}]]},
      "c2": {"start": "2018-05-04T10:00:00Z", "messages": [[{"text": "alone", "sender": "z"}]]}
    }"#;

    #[test]
    fn chats_read_as_alternating_turns_with_the_first_sender_as_the_player() {
        let chats = everyday_chats(CORPUS.as_bytes(), 10).unwrap();
        assert_eq!(chats.len(), 1, "a one-turn chat is left out");
        assert_eq!(chats[0].turns.len(), 2);
        assert!(chats[0].turns[0].0);
        assert_eq!(chats[0].turns[1], (false, "Puppies are adorable! What breed is Biscuit?".to_owned()));
    }
}
