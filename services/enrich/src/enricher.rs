//! Builds the reply to one enrich request: the pair's data from the cache or, on a miss,
//! from Postgres with every provider's load under its own timeout; then the sections
//! within their token budgets, `{reputation}`, `{memory_context}` and the rendered
//! system prompt, never more than `max_tokens` by the cl100k_base tokenizer.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use npcmem_core::context::{
    self, BudgetManager, ContextMemory, MEMORY_HEADER, format_age, memory_line, mood_description, relationship_summary,
};
use npcmem_core::relationship::{Relationship, Stage};
use npcmem_core::tokens::count_tokens_cached as count_tokens;
use npcmem_core::wire::{ContextSection, EnrichReply, EnrichRequest};
use npcmem_store::context::{self as reads, Fact};
use npcmem_store::{PgPool, StoreError, relationships, working_memory};
use tokio::sync::mpsc;

use crate::metrics::EnrichMetrics;

pub type Pair = (uuid::Uuid, uuid::Uuid);

/// What one pair's context is built from; each part is None when its load failed or
/// timed out (the entry is then not cached).
#[derive(Debug, Clone, Default)]
pub struct PairData {
    pub relationship: Option<RelationshipPart>,
    pub working_memory: Option<Vec<(String, DateTime<Utc>)>>,
    pub memories: Option<(Vec<ContextMemory>, context::RelevanceIndex)>,
    pub knowledge: Option<Vec<Fact>>,
    pub mood: Option<Option<reads::CurrentMood>>,
}

#[derive(Debug, Clone, Default)]
pub struct RelationshipPart {
    pub relationship: Option<Relationship>,
    pub faction_standing: Vec<(String, f64)>,
}

impl PairData {
    fn complete(&self) -> bool {
        self.relationship.is_some()
            && self.working_memory.is_some()
            && self.memories.is_some()
            && self.knowledge.is_some()
            && self.mood.is_some()
    }
}

pub struct Enricher {
    pub pool: PgPool,
    pub cache: moka::future::Cache<Pair, Arc<PairData>>,
    pub budgets: BudgetManager,
    pub timeout: Duration,
    pub default_max_tokens: u32,
    pub metrics: EnrichMetrics,
    pub accessed: mpsc::UnboundedSender<Vec<uuid::Uuid>>,
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
        let data = match self.cache.get(&pair).await {
            Some(data) => {
                self.metrics.cache("hit");
                data
            }
            None => {
                self.metrics.cache("miss");
                let data = self.load(pair, now, &mut degraded).await;
                let data = Arc::new(data);
                if data.complete() {
                    self.cache.insert(pair, data.clone()).await;
                }
                data
            }
        };

        let mut sections: Vec<ContextSection> = Vec::new();
        let mut placeholders = BTreeMap::new();
        if let Some(part) = &data.relationship {
            let heard: Vec<String> = data
                .knowledge
                .iter()
                .flatten()
                .filter(|fact| fact.valid_at(now))
                .filter(|fact| fact.subject_id == Some(request.player_id) && fact.category == "player_trait")
                .map(|fact| fact.content.clone())
                .collect();
            let met = part.relationship.as_ref().filter(|r| r.stage != Stage::Stranger);
            placeholders.insert("reputation".to_owned(), context::reputation(met, &part.faction_standing, &heard));
            if let Some(relationship) = met {
                push_within(
                    &mut sections,
                    "relationship",
                    relationship_summary(relationship),
                    self.budget("relationship", max_tokens),
                );
            }
        }
        if let Some(summaries) = data.working_memory.as_ref().filter(|s| !s.is_empty()) {
            let lines: Vec<String> =
                summaries.iter().map(|(summary, at)| format!("- {summary} ({})", format_age(*at, now))).collect();
            push_lines(
                &mut sections,
                "working_memory",
                "Your recent conversations with this player:",
                &lines,
                self.budget("working_memory", max_tokens),
            );
        }
        let mut memory_lines: Vec<(uuid::Uuid, String)> = Vec::new();
        if let Some((memories, index)) = data.memories.as_ref().filter(|(m, _)| !m.is_empty()) {
            let budget = self.budget("memory", max_tokens);
            let mut used = count_tokens(MEMORY_HEADER) + 1;
            for memory in context::rank_indexed(memories, index, request.message.as_deref(), now) {
                let line = memory_line(memory, now);
                let cost = count_tokens(&line) + 1;
                if used + cost > budget {
                    break;
                }
                used += cost;
                memory_lines.push((memory.id, line));
            }
        }
        let facts: Vec<String> = data
            .knowledge
            .iter()
            .flatten()
            .filter(|fact| fact.valid_at(now))
            .map(|fact| format!("- {}{}", fact.content, if fact.confidence < 0.7 { " (you are not sure)" } else { "" }))
            .collect();
        if !facts.is_empty() {
            push_lines(&mut sections, "knowledge", "Things you know:", &facts, self.budget("knowledge", max_tokens));
        }
        if let Some(Some(mood)) = data.mood.as_ref().filter(|mood| mood.as_ref().is_some_and(|m| m.valid_at(now))) {
            push_within(
                &mut sections,
                "mood",
                format!("You are feeling {}.", mood_description(&mood.mood, mood.intensity)),
                self.budget("mood", max_tokens),
            );
        }

        // The memory section goes in last so a prompt over the limit sheds memories first.
        loop {
            let mut all = sections.clone();
            if !memory_lines.is_empty() {
                let text = std::iter::once(MEMORY_HEADER.to_owned())
                    .chain(memory_lines.iter().map(|(_, line)| line.clone()))
                    .collect::<Vec<_>>()
                    .join("\n");
                let token_count = count_tokens(&text) as u32;
                if token_count as usize > self.budget("memory", max_tokens) {
                    memory_lines.pop();
                    continue;
                }
                let position = all.iter().position(|s| s.provider == "knowledge").unwrap_or(all.len());
                all.insert(position, ContextSection { provider: "memory".into(), content: text, token_count });
            }
            let memory_context = all.iter().map(|s| s.content.as_str()).collect::<Vec<_>>().join("\n\n");
            placeholders.insert("memory_context".to_owned(), memory_context);
            let (system_prompt, token_count) = match &request.npc {
                Some(persona) => {
                    let prompt = context::render_prompt(request.template.as_deref(), persona, &placeholders);
                    let count = count_tokens(&prompt) as u32;
                    (Some(prompt), count)
                }
                None => (None, all.iter().map(|s| s.token_count).sum()),
            };
            if token_count <= max_tokens {
                let ids: Vec<uuid::Uuid> = memory_lines.iter().map(|(id, _)| *id).collect();
                if !ids.is_empty() {
                    let _ = self.accessed.send(ids);
                }
                let elapsed_us = started.elapsed().as_micros() as u64;
                self.metrics.request(elapsed_us);
                return Ok(EnrichReply {
                    sections: all,
                    placeholders,
                    system_prompt,
                    token_count,
                    degraded,
                    elapsed_us,
                });
            }
            if memory_lines.pop().is_none() && sections.pop().is_none() {
                return Err(RequestError {
                    code: "max_tokens_too_small",
                    message: format!(
                        "the prompt without any context takes {token_count} tokens, more than max_tokens {max_tokens}"
                    ),
                });
            }
        }
    }

    fn budget(&self, provider: &str, max_tokens: u32) -> usize {
        self.budgets.allocate(provider, max_tokens) as usize
    }

    /// Loads every part at once, each under the provider timeout.
    async fn load(&self, pair: Pair, now: DateTime<Utc>, degraded: &mut Vec<String>) -> PairData {
        let (npc_id, player_id) = pair;
        let pool = &self.pool;
        let relationship = async {
            let mut connection = pool.acquire().await?;
            let relationship = relationships::load(&mut connection, &[pair]).await?.pop().map(|(_, r)| r);
            let faction_standing = reads::faction_standing(&mut connection, npc_id, player_id).await?;
            Ok::<_, StoreError>(RelationshipPart { relationship, faction_standing })
        };
        let summaries = async {
            let mut connection = pool.acquire().await?;
            let rows = working_memory::recent(&mut connection, npc_id, player_id).await?;
            Ok::<_, StoreError>(rows.into_iter().map(|row| (row.summary, row.ended_at)).collect::<Vec<_>>())
        };
        let memories = async {
            let mut connection = pool.acquire().await?;
            let memories = reads::prompt_memories(&mut connection, npc_id, player_id).await?;
            let index = context::RelevanceIndex::build(&memories);
            Ok::<_, StoreError>((memories, index))
        };
        let knowledge = async {
            let mut connection = pool.acquire().await?;
            reads::knowledge(&mut connection, npc_id, now, None, None, 10).await
        };
        let mood = async {
            let mut connection = pool.acquire().await?;
            reads::mood(&mut connection, npc_id, now).await
        };
        let timeout = self.timeout;
        let (relationship, summaries, memories, knowledge, mood) = tokio::join!(
            bounded(timeout, relationship),
            bounded(timeout, summaries),
            bounded(timeout, memories),
            bounded(timeout, knowledge),
            bounded(timeout, mood),
        );
        for (name, ok) in [
            ("relationship", relationship.is_some()),
            ("working_memory", summaries.is_some()),
            ("memory", memories.is_some()),
            ("knowledge", knowledge.is_some()),
            ("mood", mood.is_some()),
        ] {
            if !ok {
                self.metrics.degraded(name);
                degraded.push(name.to_owned());
            }
        }
        PairData { relationship, working_memory: summaries, memories, knowledge, mood }
    }
}

/// The value, or None when it failed or took longer than `timeout`.
async fn bounded<T>(timeout: Duration, work: impl Future<Output = Result<T, StoreError>>) -> Option<T> {
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(error)) => {
            tracing::warn!(%error, "context provider failed");
            None
        }
        Err(_) => None,
    }
}

/// One section when it fits its budget.
fn push_within(sections: &mut Vec<ContextSection>, provider: &str, content: String, budget: usize) {
    let token_count = count_tokens(&content);
    if token_count <= budget && !content.is_empty() {
        sections.push(ContextSection { provider: provider.to_owned(), content, token_count: token_count as u32 });
    }
}

/// A header and as many lines as fit the budget (none: no section).
fn push_lines(sections: &mut Vec<ContextSection>, provider: &str, header: &str, lines: &[String], budget: usize) {
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
    if kept.len() > 1 {
        let content = kept.join("\n");
        let token_count = count_tokens(&content) as u32;
        if token_count as usize <= budget {
            sections.push(ContextSection { provider: provider.to_owned(), content, token_count });
        }
    }
}
