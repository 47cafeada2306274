//! Consolidation rules: job
//! schedules, tag clusters of old episodic memories, the original design's consolidation prompt and
//! its reply, the rules summariser used without an LLM (or when its budget or breaker
//! says so), and procedural patterns.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveTime, TimeDelta, Utc};
use serde::Deserialize;

use crate::extraction::prompt::{ChatMessage, ChatRole};
use crate::memory::round3;

/// Seed `MemoryConsolidator.MIN_CLUSTER_SIZE` and `MIN_AGE_DAYS`.
pub const MIN_CLUSTER_SIZE: usize = 3;
pub const MIN_AGE_DAYS: i64 = 7;
/// Conversations a tag pattern must recur in to become a procedural memory.
pub const MIN_PATTERN_CONVERSATIONS: usize = 3;

pub const CONSOLIDATION_SYSTEM: &str = "You are a memory consolidation engine.";
pub const CONSOLIDATION_PROMPT: &str = "Summarise these NPC memories into a single general fact.
The summary should capture the overall pattern or relationship, not individual events.
Return JSON: {\"content\": \"...\", \"tags\": [...], \"confidence\": 0.0-1.0}

Memories:
{memories}";
pub const CONSOLIDATION_TEMPERATURE: f32 = 0.3;
pub const CONSOLIDATION_MAX_OUTPUT_TOKENS: u32 = 200;

/// When a job runs: `every 6h` (also `s`, `m`, `d`), or `daily 03:00` (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    Every(Duration),
    Daily(NaiveTime),
}

impl Schedule {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(rest) = text.strip_prefix("every ") {
            let rest = rest.trim();
            let (number, unit) = rest.split_at(rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len()));
            let count: i64 =
                number.parse().map_err(|_| format!("schedule {text:?}: expected a number after 'every'"))?;
            let period = match unit.trim() {
                "s" => Duration::seconds(count),
                "m" => Duration::minutes(count),
                "h" => Duration::hours(count),
                "d" => Duration::days(count),
                other => return Err(format!("schedule {text:?}: unit {other:?} is not s, m, h or d")),
            };
            if period < Duration::seconds(1) {
                return Err(format!("schedule {text:?}: the period must be at least 1 s"));
            }
            return Ok(Schedule::Every(period));
        }
        if let Some(rest) = text.strip_prefix("daily ") {
            let time = NaiveTime::parse_from_str(rest.trim(), "%H:%M")
                .map_err(|_| format!("schedule {text:?}: expected daily HH:MM (UTC)"))?;
            return Ok(Schedule::Daily(time));
        }
        Err(format!("schedule {text:?}: expected 'every <N>s|m|h|d' or 'daily HH:MM'"))
    }

    /// The latest tick at or before `now`: the run a job owes. Ticks of `every` schedules
    /// are aligned to the Unix epoch, so every replica computes the same ones.
    pub fn latest_tick(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Schedule::Every(period) => {
                let period_ms = period.num_milliseconds().max(1);
                let now_ms = now.timestamp_millis();
                DateTime::from_timestamp_millis(now_ms - now_ms.rem_euclid(period_ms)).unwrap_or(now)
            }
            Schedule::Daily(time) => {
                let today = now.date_naive().and_time(*time).and_utc();
                if today <= now { today } else { today - TimeDelta::days(1) }
            }
        }
    }
}

/// An episodic memory as consolidation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub id: uuid::Uuid,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub locked: bool,
}

/// A cluster to consolidate: the shared tag and its episodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub tag: String,
    pub episodes: Vec<Episode>,
}

/// Clusters of ≥ 3 episodes sharing a tag, largest first (ties by tag). An episode goes
/// into the first cluster it can join, so none is consolidated twice.
pub fn clusters(episodes: &[Episode]) -> Vec<Cluster> {
    let mut by_tag: BTreeMap<&str, Vec<&Episode>> = BTreeMap::new();
    for episode in episodes {
        for tag in &episode.tags {
            by_tag.entry(tag.as_str()).or_default().push(episode);
        }
    }
    let mut candidates: Vec<(&str, Vec<&Episode>)> = by_tag.into_iter().collect();
    candidates.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    let mut used = std::collections::BTreeSet::new();
    let mut clusters = Vec::new();
    for (tag, members) in candidates {
        let free: Vec<Episode> = members.into_iter().filter(|e| !used.contains(&e.id)).cloned().collect();
        if free.len() >= MIN_CLUSTER_SIZE {
            used.extend(free.iter().map(|e| e.id));
            clusters.push(Cluster { tag: tag.to_owned(), episodes: free });
        }
    }
    clusters
}

/// The semantic memory a cluster becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub content: String,
    pub tags: Vec<String>,
    pub confidence: f64,
}

/// The original design's two messages for one cluster.
pub fn consolidation_messages(cluster: &Cluster) -> Vec<ChatMessage> {
    let memories = cluster.episodes.iter().map(|e| format!("- {}", e.content)).collect::<Vec<_>>().join("\n");
    vec![
        ChatMessage { role: ChatRole::System, content: CONSOLIDATION_SYSTEM.to_owned() },
        ChatMessage { role: ChatRole::User, content: CONSOLIDATION_PROMPT.replace("{memories}", &memories) },
    ]
}

#[derive(Deserialize)]
struct Reply {
    content: Option<String>,
    #[serde(default)]
    tags: Vec<serde_json::Value>,
    confidence: Option<serde_json::Value>,
}

/// Parses the model's reply (a JSON object, possibly inside a code fence or prose);
/// None when it has no usable content. The cluster's tag is always kept among the tags.
pub fn parse_summary(raw: &str, cluster: &Cluster) -> Option<Summary> {
    let start = raw.find('{')?;
    let end = raw.rfind('}')?;
    let reply: Reply = serde_json::from_str(raw.get(start..=end)?).ok()?;
    let content = crate::extraction::parse::normalize_content(reply.content.as_deref()?)?;
    let mut tags: Vec<String> = vec![cluster.tag.clone()];
    for tag in reply.tags.iter().filter_map(|t| t.as_str()).filter_map(crate::extraction::parse::normalize_tag) {
        if !tags.contains(&tag) && tags.len() < crate::extraction::parse::MAX_TAGS {
            tags.push(tag);
        }
    }
    let confidence = match reply.confidence {
        Some(serde_json::Value::Number(n)) => n.as_f64().unwrap_or(0.7),
        Some(serde_json::Value::String(s)) => s.trim().parse().unwrap_or(0.7),
        _ => 0.7,
    };
    let confidence = if confidence.is_nan() { 0.7 } else { round3(confidence.clamp(0.0, 1.0)) };
    Some(Summary { content, tags, confidence })
}

/// What the player does, for a tag the relationship rules know.
fn habit(tag: &str) -> Option<&'static str> {
    Some(match tag {
        "trade" => "trades with me",
        "helpful" => "helps me",
        "heroic" => "acts bravely",
        "quest" => "takes on tasks for me",
        "threat" => "threatens me",
        "insult" => "insults me",
        "gift" => "brings me gifts",
        "combat" => "gets into fights",
        "betrayal" => "betrays trust",
        "promise" => "makes promises",
        "secret" => "shares secrets with me",
        _ => return None,
    })
}

/// The rules summariser: a general fact from the cluster's tag and size, confidence
/// growing with the evidence (0.6 for 3 episodes, +0.05 each, at most 0.9).
pub fn summarise_with_rules(cluster: &Cluster) -> Summary {
    let count = cluster.episodes.len();
    let content = match habit(&cluster.tag) {
        Some(habit) => format!("The player often {habit} ({count} times)."),
        None => {
            format!("Many of my dealings with the player involved {} ({count} times).", cluster.tag.replace('_', " "))
        }
    };
    let mut tags = vec![cluster.tag.clone()];
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for episode in &cluster.episodes {
        for tag in &episode.tags {
            *counts.entry(tag.as_str()).or_default() += 1;
        }
    }
    for (tag, seen) in counts {
        if seen * 2 > count && !tags.iter().any(|t| t == tag) && tags.len() < crate::extraction::parse::MAX_TAGS {
            tags.push(tag.to_owned());
        }
    }
    let confidence = round3((0.6 + 0.05 * (count.saturating_sub(MIN_CLUSTER_SIZE)) as f64).min(0.9));
    Summary { content, tags, confidence }
}

/// The pattern text of a procedural memory for a sorted tag set.
pub fn procedural_pattern(tags: &[String]) -> String {
    tags.join("+")
}

/// The content of a procedural memory for a tag pattern.
pub fn procedural_content(tags: &[String]) -> String {
    let habits: Vec<String> =
        tags.iter().map(|tag| habit(tag).map(str::to_owned).unwrap_or_else(|| format!("brings up {tag}"))).collect();
    format!("The player keeps coming back: each time, they {}.", habits.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use uuid::Uuid;

    fn episode(tags: &[&str], content: &str) -> Episode {
        Episode {
            id: Uuid::new_v4(),
            content: content.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            importance: 0.5,
            locked: false,
        }
    }

    #[test]
    fn schedules_parse_and_tick_the_same_on_every_replica() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 10, 17, 5).unwrap();
        assert_eq!(
            Schedule::parse("every 1h").unwrap().latest_tick(now),
            Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap()
        );
        assert_eq!(
            Schedule::parse("daily 03:00").unwrap().latest_tick(now),
            Utc.with_ymd_and_hms(2026, 3, 1, 3, 0, 0).unwrap()
        );
        assert_eq!(
            Schedule::parse("daily 23:30").unwrap().latest_tick(now),
            Utc.with_ymd_and_hms(2026, 2, 28, 23, 30, 0).unwrap()
        );
        assert!(Schedule::parse("every 0s").is_err());
        assert!(Schedule::parse("hourly").is_err());
        assert!(Schedule::parse("every 5 weeks").is_err());
    }

    #[test]
    fn clusters_need_three_and_use_each_episode_once() {
        let episodes = vec![
            episode(&["trade"], "a"),
            episode(&["trade", "haggle"], "b"),
            episode(&["trade", "haggle"], "c"),
            episode(&["haggle"], "d"),
            episode(&["threat"], "e"),
            episode(&["trade"], "f"),
        ];
        let found = clusters(&episodes);
        assert_eq!(found.len(), 1, "haggle has only one free episode left after trade");
        assert_eq!(found[0].tag, "trade");
        assert_eq!(found[0].episodes.len(), 4);
    }

    #[test]
    fn replies_parse_from_json_or_fences_and_bad_ones_are_refused() {
        let cluster = Cluster { tag: "trade".into(), episodes: vec![] };
        let summary = parse_summary(
            "Sure!\n```json\n{\"content\": \"The player is a regular customer.\", \"tags\": [\"Customer\"], \"confidence\": 1.7}\n```",
            &cluster,
        )
        .expect("a summary");
        assert_eq!(summary.content, "The player is a regular customer.");
        assert_eq!(summary.tags, vec!["trade", "customer"]);
        assert_eq!(summary.confidence, 1.0);
        assert!(parse_summary("no json here", &cluster).is_none());
        assert!(parse_summary("{\"tags\": []}", &cluster).is_none());
    }

    #[test]
    fn the_rules_summary_names_the_habit() {
        let cluster = Cluster {
            tag: "trade".into(),
            episodes: vec![
                episode(&["trade", "haggle"], "a"),
                episode(&["trade", "haggle"], "b"),
                episode(&["trade"], "c"),
            ],
        };
        let summary = summarise_with_rules(&cluster);
        assert_eq!(summary.content, "The player often trades with me (3 times).");
        assert_eq!(summary.tags, vec!["trade", "haggle"]);
        assert_eq!(summary.confidence, 0.6);
        let messages = consolidation_messages(&cluster);
        assert!(messages[1].content.ends_with("Memories:\n- a\n- b\n- c"));
    }
}
