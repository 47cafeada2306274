//! Builds the reply to one enrich request: the pair's data from the loader (the cache,
//! or Postgres with every part under the provider timeout); then the sections
//! within their token budgets, `{reputation}`, `{memory_context}` and the rendered
//! system prompt, never more than `max_tokens` by the cl100k_base tokenizer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use npcmem_core::context::{
    self, BudgetManager, MEMORY_HEADER, format_age, memory_line, mood_description, relationship_summary,
};
use npcmem_core::recall::{self, PackRules, TurnVectors};
use npcmem_core::relationship::Stage;
use npcmem_core::tokens::count_tokens_cached as count_tokens;
use npcmem_core::wire::{ContextSection, EnrichReply, EnrichRequest};
use npcmem_llm::Embedder;
use tokio::sync::mpsc;

use crate::loader::{Loader, PairData};
use crate::metrics::EnrichMetrics;

/// The embedder that turns a request's message into a query vector, and how long it may take.
#[derive(Debug, Clone)]
pub struct QueryEmbedder {
    pub embedder: Embedder,
    pub timeout: Duration,
}

impl QueryEmbedder {
    /// `text`'s vector, or None (the reason pushed to `degraded`) when the embedder
    /// fails or is slower than its timeout: recall is then lexical.
    pub async fn embed(
        &self,
        text: &str,
        degraded: &mut Vec<String>,
        metrics: Option<&EnrichMetrics>,
    ) -> Option<Vec<f32>> {
        let reason = match tokio::time::timeout(self.timeout, self.embedder.embed(&[text.to_owned()])).await {
            Ok(Ok(mut vectors)) => return vectors.pop(),
            Ok(Err(error)) => error.to_string(),
            Err(_elapsed) => format!("no answer within {} ms", self.timeout.as_millis()),
        };
        tracing::debug!(%reason, "query embedding failed; recall is lexical");
        if let Some(metrics) = metrics {
            metrics.degraded(EMBEDDER);
        }
        degraded.push(EMBEDDER.to_owned());
        None
    }
}

/// How `degraded` names a query embedding that failed or timed out.
pub const EMBEDDER: &str = "embedder";

pub struct Enricher {
    pub loader: Loader,
    pub budgets: BudgetManager,
    pub default_max_tokens: u32,
    pub metrics: EnrichMetrics,
    pub accessed: mpsc::UnboundedSender<Vec<uuid::Uuid>>,
    pub recall_rules: PackRules,
    pub embedder: Option<QueryEmbedder>,
}

/// A request the enricher cannot answer as asked.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestError {
    pub code: &'static str,
    pub message: String,
}

impl Enricher {
    pub async fn enrich(&self, request: &EnrichRequest) -> Result<EnrichReply, RequestError> {
        let started = Instant::now();
        let now = Utc::now();
        let max_tokens = request.max_tokens.unwrap_or(self.default_max_tokens);
        let pair = (request.npc_id, request.player_id);
        let mut degraded = Vec::new();
        let data = self.loader.get(pair, now, &mut degraded).await;
        let query_vector = match (&self.embedder, &data.recall, request.message.as_deref()) {
            (Some(embedder), Some(recall), Some(message))
                if recall.vectors.as_ref().is_some_and(TurnVectors::any) && !message.trim().is_empty() =>
            {
                embedder.embed(message, &mut degraded, Some(&self.metrics)).await
            }
            _ => None,
        };
        let candidates = Candidates::gather(&data, request, max_tokens as usize, now, query_vector.as_deref());
        let mut placeholders = BTreeMap::new();
        placeholders.insert("reputation".to_owned(), candidates.reputation.clone());

        // The room the sections share: max_tokens less the prompt around them (and the
        // blank lines between sections). Shrunk by any overshoot until the whole fits.
        let frame = match &request.npc {
            Some(persona) => count_tokens(&context::render_prompt(request.template.as_deref(), persona, &{
                let mut empty = placeholders.clone();
                empty.insert("memory_context".to_owned(), String::new());
                empty
            })),
            None => 0,
        };
        // With a persona, one token of slack: the context's first and last tokens may not
        // merge with the template around them as the empty placeholder did.
        let mut pool = (max_tokens as usize).saturating_sub(if frame > 0 { frame + 1 } else { 0 });
        loop {
            let (sections, memory_ids) = self.pack(&candidates, &data, pool, now);
            let memory_context = sections.iter().map(|s| s.content.as_str()).collect::<Vec<_>>().join("\n\n");
            placeholders.insert("memory_context".to_owned(), memory_context);
            let (system_prompt, token_count) = match &request.npc {
                Some(persona) => {
                    let prompt = context::render_prompt(request.template.as_deref(), persona, &placeholders);
                    let count = count_tokens(&prompt) as u32;
                    (Some(prompt), count)
                }
                None => (None, count_tokens(&placeholders["memory_context"]) as u32),
            };
            if token_count <= max_tokens {
                if !memory_ids.is_empty() {
                    let _ = self.accessed.send(memory_ids);
                }
                let elapsed_us = started.elapsed().as_micros() as u64;
                self.metrics.request(elapsed_us);
                return Ok(EnrichReply { sections, placeholders, system_prompt, token_count, degraded, elapsed_us });
            }
            if pool == 0 {
                return Err(RequestError {
                    code: "max_tokens_too_small",
                    message: format!(
                        "the prompt without any context takes {token_count} tokens, more than max_tokens {max_tokens}"
                    ),
                });
            }
            let overshoot = (token_count - max_tokens) as usize;
            pool = pool.saturating_sub(overshoot.max(1));
        }
    }

    /// The sections within `pool` tokens in all (shares a section leaves
    /// unused flow to the sections that still have content), in prompt order, and the
    /// ids of the memories shown.
    fn pack(
        &self,
        candidates: &Candidates,
        data: &PairData,
        pool: usize,
        now: DateTime<Utc>,
    ) -> (Vec<ContextSection>, Vec<uuid::Uuid>) {
        // Sections are joined by a blank line: about one token each.
        let pool = pool.saturating_sub(candidates.section_count());
        let recall_need = data
            .recall
            .as_ref()
            .map_or(0, |recall| recall::estimated_need(&recall.turns, &candidates.recall_ranked).min(pool));
        let needs = [
            ("relationship", candidates.relationship.as_deref().map_or(0, count_tokens)),
            ("working_memory", lines_need(WORKING_MEMORY_HEADER, &candidates.working_memory)),
            ("memory", lines_need(MEMORY_HEADER, candidates.memory.iter().map(|(_, line)| line))),
            ("recall", recall_need),
            ("knowledge", lines_need(KNOWLEDGE_HEADER, candidates.knowledge.iter().map(|(_, line)| line))),
            ("mood", candidates.mood.as_deref().map_or(0, count_tokens)),
        ];
        let budgets = self.budgets.distribute(pool, &needs);
        let budget = |name: &str| budgets.get(name).copied().unwrap_or(0);

        let mut sections = Vec::new();
        if let Some(content) = &candidates.relationship {
            push_within(&mut sections, "relationship", content.clone(), budget("relationship"));
        }
        push_lines(
            &mut sections,
            "working_memory",
            WORKING_MEMORY_HEADER,
            &candidates.working_memory,
            budget("working_memory"),
        );
        let memory_lines: Vec<String> = candidates.memory.iter().map(|(_, line)| line.clone()).collect();
        let shown_memories = push_lines(&mut sections, "memory", MEMORY_HEADER, &memory_lines, budget("memory"));
        let memory_ids: Vec<uuid::Uuid> = candidates.memory.iter().take(shown_memories).map(|(id, _)| *id).collect();
        // The NPC's own fact about the player is the memory it came from: shown once, as
        // the memory, with its age and weight.
        let knowledge: Vec<String> = candidates
            .knowledge
            .iter()
            .filter(|(from, _)| from.is_none_or(|memory| !memory_ids.contains(&memory)))
            .map(|(_, line)| line.clone())
            .collect();
        push_lines(&mut sections, "knowledge", KNOWLEDGE_HEADER, &knowledge, budget("knowledge"));
        if let Some(content) = &candidates.mood {
            push_within(&mut sections, "mood", content.clone(), budget("mood"));
        }
        // Recall last: it also takes what the other sections' line breaks left unused.
        if let Some(recall) = &data.recall
            && !candidates.recall_ranked.is_empty()
        {
            let others: usize = sections.iter().map(|s| s.token_count as usize).sum();
            let room = pool.saturating_sub(others).max(budget("recall"));
            let shown: Vec<&str> = sections.iter().map(|s| s.content.as_str()).collect();
            if let Some(packed) =
                recall::pack(&recall.turns, &candidates.recall_ranked, room, &shown, &self.recall_rules, now)
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
        (sections, memory_ids)
    }
}

const WORKING_MEMORY_HEADER: &str = "Your recent conversations with this player:";
const KNOWLEDGE_HEADER: &str = "Things you know:";

/// Everything one request could show, ranked, before the budget cuts it.
struct Candidates {
    reputation: String,
    relationship: Option<String>,
    working_memory: Vec<String>,
    /// Memory ids and lines, best first.
    memory: Vec<(uuid::Uuid, String)>,
    /// Positions into the pair's turns, best first (empty without a message).
    recall_ranked: Vec<usize>,
    /// Fact lines, each with the holder's memory it was learned from.
    knowledge: Vec<(Option<uuid::Uuid>, String)>,
    mood: Option<String>,
}

/// Recall ranks at most this many turns; more never fit a prompt.
const RECALL_CANDIDATES: usize = 400;

impl Candidates {
    fn gather(
        data: &PairData,
        request: &EnrichRequest,
        max_tokens: usize,
        now: DateTime<Utc>,
        query_vector: Option<&[f32]>,
    ) -> Self {
        // No line takes fewer than ~8 tokens: more lines than this never fit.
        let most_lines = max_tokens / 8;
        let mut reputation = context::STRANGER.to_owned();
        let mut relationship = None;
        if let Some(part) = &data.relationship {
            let heard: Vec<String> = data
                .knowledge
                .iter()
                .flat_map(|facts| facts.iter())
                .filter(|fact| fact.valid_at(now))
                .filter(|fact| fact.subject_id == Some(request.player_id) && fact.category == "player_trait")
                .map(|fact| fact.content.clone())
                .collect();
            let met = part.relationship.as_ref().filter(|r| r.stage != Stage::Stranger);
            reputation = context::reputation(met, &part.faction_standing, &heard);
            relationship = met.map(relationship_summary);
        }
        let working_memory = data
            .working_memory
            .iter()
            .flat_map(|rows| rows.iter())
            .map(|(summary, at)| format!("- {summary} ({})", format_age(*at, now)))
            .collect();
        let memory = match &data.memories {
            Some(part) => {
                // Lines past max_tokens in all never fit: not formatted.
                let mut tokens = 0;
                context::rank_indexed(&part.0, &part.1, request.message.as_deref(), now)
                    .into_iter()
                    .take(most_lines)
                    .map_while(|memory| {
                        (tokens <= max_tokens).then(|| {
                            let line = memory_line(memory, now);
                            tokens += count_tokens(&line) + 1;
                            (memory.id, line)
                        })
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let recall_ranked = match (&data.recall, request.message.as_deref()) {
            (Some(recall), Some(message)) => {
                let lexical: Vec<usize> = recall
                    .index
                    .search(message)
                    .into_iter()
                    .take(RECALL_CANDIDATES)
                    .map(|(position, _)| position)
                    .collect();
                let dense = query_vector
                    .zip(recall.vectors.as_ref())
                    .map(|(query, vectors)| recall::dense_ranking(query, vectors, RECALL_CANDIDATES));
                recall::hybrid_ranking(&lexical, dense.as_deref(), RECALL_CANDIDATES)
            }
            _ => Vec::new(),
        };
        let knowledge = data
            .knowledge
            .iter()
            .flat_map(|facts| facts.iter())
            .filter(|fact| fact.valid_at(now))
            .map(|fact| (fact.source_memory_id, format!("- {}", fact.told)))
            .collect();
        let mood = data
            .mood
            .as_ref()
            .and_then(|mood| Option::as_ref(mood))
            .filter(|mood| mood.valid_at(now))
            .map(|mood| format!("You are feeling {}.", mood_description(&mood.mood, mood.intensity)));
        Self { reputation, relationship, working_memory, memory, recall_ranked, knowledge, mood }
    }

    /// How many sections could be shown (for the blank lines between them).
    fn section_count(&self) -> usize {
        usize::from(self.relationship.is_some())
            + usize::from(!self.working_memory.is_empty())
            + usize::from(!self.memory.is_empty())
            + usize::from(!self.recall_ranked.is_empty())
            + usize::from(!self.knowledge.is_empty())
            + usize::from(self.mood.is_some())
    }
}

/// Tokens of a header and all its lines (0 without lines).
fn lines_need<'a>(header: &str, lines: impl IntoIterator<Item = &'a String>) -> usize {
    let mut lines = lines.into_iter().peekable();
    if lines.peek().is_none() {
        return 0;
    }
    // As push_lines counts: the header and each line with its line break.
    count_tokens(header) + 1 + lines.map(|line| count_tokens(line) + 1).sum::<usize>()
}

/// One section when it fits its budget.
fn push_within(sections: &mut Vec<ContextSection>, provider: &str, content: String, budget: usize) {
    let token_count = count_tokens(&content);
    if token_count <= budget && !content.is_empty() {
        sections.push(ContextSection { provider: provider.to_owned(), content, token_count: token_count as u32 });
    }
}

/// A header and as many lines as fit the budget (none: no section); returns how many
/// lines it shows.
fn push_lines(
    sections: &mut Vec<ContextSection>,
    provider: &str,
    header: &str,
    lines: &[String],
    budget: usize,
) -> usize {
    let mut kept = vec![header.to_owned()];
    let mut used = count_tokens(header) + 1;
    for line in lines {
        let cost = count_tokens(line) + 1;
        if used + cost > budget {
            break;
        }
        used += cost;
        kept.push(line.clone());
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
