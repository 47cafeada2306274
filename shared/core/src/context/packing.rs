//! Prompt packing: which of a pair's candidate lines reach the prompt within a token
//! budget, section by section.
//!
//! Each section has a share of the budget ([`BudgetManager`]), but the share a section
//! gets is earned by its relevance to *this* message: lines that share a word with the
//! message (and locked memories, which are always shown) are served first, every
//! section's share of them in proportion to its configured share; only what is left goes
//! to lines that do not match. So recalled turns that answer the question are not pushed
//! out by memories that have nothing to do with it, and without a message (or with one
//! that matches nothing) the shares fall back to the configured ones.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{BudgetManager, MEMORY_HEADER};
use crate::recall::{self, PackRules, Turn};
use crate::tokens::count_tokens_cached as count_tokens;
use crate::wire::ContextSection;

pub const WORKING_MEMORY_HEADER: &str = "Your recent conversations with this player:";
pub const KNOWLEDGE_HEADER: &str = "Things you know:";

/// One candidate line of a section, its cost, and whether it is relevant to the message.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Shared: a pair's memory lines are kept formatted ([`super::MemoryLines`]).
    pub text: Arc<str>,
    /// Its tokens with the line break after it (an upper bound when it ends the section).
    pub tokens: usize,
    /// Shares a word with the message (or must be shown, like a locked memory).
    pub matches: bool,
}

impl Line {
    pub fn new(text: String, matches: bool) -> Self {
        let tokens = line_tokens(&text);
        Self { text: text.into(), tokens, matches }
    }
}

/// A line's tokens with the line break after it, as [`Line::tokens`] holds them.
pub fn line_tokens(text: &str) -> usize {
    count_tokens(text) + 1
}

/// A memory's line and id (the ids of shown memories count as accessed).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryLine {
    pub id: Uuid,
    pub line: Line,
}

/// A knowledge fact's line, with the holder's memory it was learned from: a fact whose
/// memory is shown is left out, so the NPC reads it once, as the memory.
#[derive(Debug, Clone, PartialEq)]
pub struct FactLine {
    pub source_memory_id: Option<Uuid>,
    pub line: Line,
}

/// The pair's turns and their ranking for the message (positions, best first).
#[derive(Debug, Clone)]
pub struct RecallCandidates<'a> {
    pub turns: &'a [Turn],
    /// The pair's kept line costs ([`recall::LineCosts`]).
    pub costs: &'a recall::LineCosts,
    pub ranked: Vec<usize>,
}

/// Everything one request could show, each section's lines best first.
#[derive(Debug, Clone, Default)]
pub struct Candidates<'a> {
    pub relationship: Option<String>,
    pub working_memory: Vec<Line>,
    pub memory: Vec<MemoryLine>,
    pub recall: Option<RecallCandidates<'a>>,
    pub knowledge: Vec<FactLine>,
    pub mood: Option<String>,
}

/// The packed sections in prompt order, and the ids of the memories they show.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Packed {
    pub sections: Vec<ContextSection>,
    pub memory_ids: Vec<Uuid>,
}

/// The stemmed terms of a message, to test lines against ([`shares_a_term`]).
pub fn message_terms(message: &str) -> HashSet<String> {
    recall::terms(message).into_iter().collect()
}

/// Whether `text` shares an index term (a stemmed word that is not a stop word) with the
/// message.
pub fn shares_a_term(text: &str, message_terms: &HashSet<String>) -> bool {
    !message_terms.is_empty() && recall::terms(text).iter().any(|term| message_terms.contains(term))
}

impl Candidates<'_> {
    /// How many sections could be shown (for the blank lines between them).
    fn section_count(&self) -> usize {
        usize::from(self.relationship.is_some())
            + usize::from(!self.working_memory.is_empty())
            + usize::from(!self.memory.is_empty())
            + usize::from(self.recall.as_ref().is_some_and(|recall| !recall.ranked.is_empty()))
            + usize::from(!self.knowledge.is_empty())
            + usize::from(self.mood.is_some())
    }
}

/// Lines with the matching ones first, each group in its given order.
fn matching_first<'l>(lines: impl Iterator<Item = &'l Line> + Clone) -> Vec<&'l Line> {
    lines.clone().filter(|line| line.matches).chain(lines.filter(|line| !line.matches)).collect()
}

/// Packs the sections within `pool` tokens in all (the blank lines between sections
/// included), in prompt order: relationship, working memory, memory, recall, knowledge,
/// mood.
pub fn pack(
    candidates: &Candidates,
    budgets: &BudgetManager,
    recall_rules: &PackRules,
    pool: usize,
    now: DateTime<Utc>,
) -> Packed {
    // Sections are joined by a blank line: about one token each.
    let pool = pool.saturating_sub(candidates.section_count());
    let working_memory = matching_first(candidates.working_memory.iter());
    let memory_order: Vec<&MemoryLine> = candidates
        .memory
        .iter()
        .filter(|memory| memory.line.matches)
        .chain(candidates.memory.iter().filter(|memory| !memory.line.matches))
        .collect();
    let memory: Vec<&Line> = memory_order.iter().map(|memory| &memory.line).collect();
    let knowledge_all = matching_first(candidates.knowledge.iter().map(|fact| &fact.line));

    let recall_need =
        candidates.recall.as_ref().map_or(0, |recall| recall::estimated_need(recall.turns, &recall.ranked).min(pool));
    let fixed = |text: &Option<String>| text.as_deref().map_or(0, count_tokens);
    let (relationship, mood) = (fixed(&candidates.relationship), fixed(&candidates.mood));
    // The best line of each list section, where it fits the section's configured share:
    // whatever the message, the NPC keeps its latest talk and strongest memory in view.
    let floor = |name: &str, header: &str, lines: &[&Line]| {
        let need = lines_need(header, lines.iter().take(1));
        if need <= budgets.allocate(name, pool as u32) as usize { need } else { 0 }
    };
    // Three tiers, each split by the shares: the floors, then the lines that match the
    // message, then everything; each tier's needs are cumulative.
    let tiers = [
        [
            ("relationship", relationship),
            ("working_memory", floor("working_memory", WORKING_MEMORY_HEADER, &working_memory)),
            ("memory", floor("memory", MEMORY_HEADER, &memory)),
            ("recall", 0),
            ("knowledge", floor("knowledge", KNOWLEDGE_HEADER, &knowledge_all)),
            ("mood", mood),
        ],
        [
            ("relationship", relationship),
            ("working_memory", lines_need(WORKING_MEMORY_HEADER, working_memory.iter().filter(|l| l.matches))),
            ("memory", lines_need(MEMORY_HEADER, memory.iter().filter(|l| l.matches))),
            ("recall", recall_need),
            ("knowledge", lines_need(KNOWLEDGE_HEADER, knowledge_all.iter().filter(|l| l.matches))),
            ("mood", mood),
        ],
        [
            ("relationship", relationship),
            ("working_memory", lines_need(WORKING_MEMORY_HEADER, working_memory.iter())),
            ("memory", lines_need(MEMORY_HEADER, memory.iter())),
            ("recall", recall_need),
            ("knowledge", lines_need(KNOWLEDGE_HEADER, knowledge_all.iter())),
            ("mood", mood),
        ],
    ];
    let mut granted: BTreeMap<String, usize> = BTreeMap::new();
    for tier in tiers {
        let left = pool.saturating_sub(granted.values().sum());
        let wanted: Vec<(&str, usize)> = tier
            .iter()
            .map(|&(name, need)| (name, need.saturating_sub(granted.get(name).copied().unwrap_or(0))))
            .collect();
        for (name, more) in budgets.distribute(left, &wanted) {
            *granted.entry(name).or_default() += more;
        }
    }
    let budget = |name: &str| granted.get(name).copied().unwrap_or(0);

    let mut sections = Vec::new();
    if let Some(content) = &candidates.relationship {
        push_within(&mut sections, "relationship", content.clone(), budget("relationship"));
    }
    push_lines(&mut sections, "working_memory", WORKING_MEMORY_HEADER, &working_memory, budget("working_memory"));
    let shown_memories = push_lines(&mut sections, "memory", MEMORY_HEADER, &memory, budget("memory"));
    let memory_ids: Vec<Uuid> = memory_order.iter().take(shown_memories).map(|memory| memory.id).collect();
    // The NPC's own fact about the player is the memory it came from: shown once, as the
    // memory, with its age and weight.
    let knowledge: Vec<&Line> = matching_first(
        candidates
            .knowledge
            .iter()
            .filter(|fact| fact.source_memory_id.is_none_or(|memory| !memory_ids.contains(&memory)))
            .map(|fact| &fact.line),
    );
    push_lines(&mut sections, "knowledge", KNOWLEDGE_HEADER, &knowledge, budget("knowledge"));
    if let Some(content) = &candidates.mood {
        push_within(&mut sections, "mood", content.clone(), budget("mood"));
    }
    // Recall last: it also takes what the other sections' line breaks left unused.
    if let Some(recall) = candidates.recall.as_ref().filter(|recall| !recall.ranked.is_empty()) {
        let others: usize = sections.iter().map(|s| s.token_count as usize).sum();
        let room = pool.saturating_sub(others).max(budget("recall"));
        let shown: Vec<&str> = sections.iter().map(|s| s.content.as_str()).collect();
        if let Some(packed) = recall::pack(recall.turns, recall.costs, &recall.ranked, room, &shown, recall_rules, now)
        {
            let position = sections.iter().position(|s| s.provider == "knowledge" || s.provider == "mood");
            let section = ContextSection {
                provider: "recall".into(),
                content: packed.content,
                token_count: packed.token_count as u32,
            };
            sections.insert(position.unwrap_or(sections.len()), section);
        }
    }
    Packed { sections, memory_ids }
}

/// Tokens of a header and all its lines (0 without lines).
fn lines_need<'l>(header: &str, lines: impl Iterator<Item = &'l &'l Line>) -> usize {
    let mut lines = lines.peekable();
    if lines.peek().is_none() {
        return 0;
    }
    // As push_lines counts: the header and each line with its line break.
    count_tokens(header) + 1 + lines.map(|line| line.tokens).sum::<usize>()
}

/// One section when it fits its budget.
fn push_within(sections: &mut Vec<ContextSection>, provider: &str, content: String, budget: usize) {
    let token_count = count_tokens(&content);
    if token_count <= budget && !content.is_empty() {
        sections.push(ContextSection { provider: provider.to_owned(), content, token_count: token_count as u32 });
    }
}

/// A header and as many lines as fit the budget, in order (none: no section); returns
/// how many lines it shows.
fn push_lines(
    sections: &mut Vec<ContextSection>,
    provider: &str,
    header: &str,
    lines: &[&Line],
    budget: usize,
) -> usize {
    let mut kept = vec![header];
    let mut used = count_tokens(header) + 1;
    for line in lines {
        let cost = line.tokens;
        if used + cost > budget {
            break;
        }
        used += cost;
        kept.push(&line.text);
    }
    while kept.len() > 1 {
        let content = kept.join("\n");
        let token_count = count_tokens(&content) as u32;
        if token_count as usize <= budget {
            sections.push(ContextSection { provider: provider.to_owned(), content, token_count });
            return kept.len() - 1;
        }
        kept.pop();
    }
    0
}

#[cfg(test)]
mod tests;
