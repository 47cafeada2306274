//! Builds the reply to one enrich request: the pair's data from the loader (the cache,
//! or Postgres with every part under the provider timeout); then the sections
//! within their token budgets, `{reputation}`, `{memory_context}` and the rendered
//! system prompt, never more than `max_tokens` by the cl100k_base tokenizer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use npcmem_core::context::packing::{self, FactLine, Line, MemoryLine, Packed, RecallCandidates};
use npcmem_core::context::{self, BudgetManager, format_when, mood_description, relationship_summary};
use npcmem_core::recall::{self, PackRules, TurnVectors};
use npcmem_core::relationship::Stage;
use npcmem_core::tokens::count_tokens_cached as count_tokens;
use npcmem_core::wire::{EnrichReply, EnrichRequest};
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
        // Every age in the reply is read from the start of this minute (memory lines are
        // kept formatted a minute at a time).
        let shown_at = context::minute_start(now);
        // With a persona, one token of slack: the context's first and last tokens may not
        // merge with the template around them as the empty placeholder did.
        let mut pool = (max_tokens as usize).saturating_sub(if frame > 0 { frame + 1 } else { 0 });
        loop {
            let Packed { sections, memory_ids } =
                packing::pack(&candidates.sections, &self.budgets, &self.recall_rules, pool, shown_at);
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
}

/// Everything one request could show, ranked, before the budget cuts it.
struct Candidates<'a> {
    reputation: String,
    sections: packing::Candidates<'a>,
}

/// Recall ranks at most this many turns; more never fit a prompt.
const RECALL_CANDIDATES: usize = 400;

impl<'a> Candidates<'a> {
    fn gather(
        data: &'a PairData,
        request: &EnrichRequest,
        max_tokens: usize,
        now: DateTime<Utc>,
        query_vector: Option<&[f32]>,
    ) -> Self {
        // No line takes fewer than ~8 tokens: more lines than this never fit.
        let most_lines = max_tokens / 8;
        let message = request.message.as_deref().filter(|message| !message.trim().is_empty());
        let message_terms = match (message, &data.recall) {
            (Some(message), Some(recall)) => recall.index.informative_terms(message),
            (Some(message), None) => packing::message_terms(message),
            (None, _) => Default::default(),
        };
        let line = |text: String| {
            let matches = packing::shares_a_term(&text, &message_terms);
            Line::new(text, matches)
        };
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
        let shown_at = context::minute_start(now);
        let working_memory = data
            .working_memory
            .iter()
            .flat_map(|rows| rows.iter())
            .map(|(summary, at)| {
                Line::new(
                    format!("- {summary} ({})", format_when(*at, shown_at)),
                    packing::shares_a_term(summary, &message_terms),
                )
            })
            .collect();
        let memory = match &data.memories {
            Some(part) => {
                // Lines past max_tokens in all never fit: not formatted.
                let mut tokens = 0;
                let lines = part.lines.at(part.memories.len(), now);
                context::rank_with_saliences(&part.memories, lines.saliences(&part.memories), &part.index, message)
                    .into_iter()
                    .take(most_lines)
                    .map_while(|(memory, relevance, position)| {
                        (tokens <= max_tokens).then(|| {
                            let (text, cost) = lines.line(position, memory);
                            tokens += cost;
                            // A locked memory is shown whatever the message.
                            let matches = memory.locked
                                || (relevance > 0.0 && part.index.shares_a_term(position, &message_terms));
                            MemoryLine { id: memory.id, line: Line { text, tokens: cost, matches } }
                        })
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let recall = match (&data.recall, message) {
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
                let ranked = recall::hybrid_ranking(&lexical, dense.as_deref(), RECALL_CANDIDATES);
                Some(RecallCandidates { turns: &recall.turns, costs: &recall.costs, ranked })
            }
            _ => None,
        };
        let knowledge = data
            .knowledge
            .iter()
            .flat_map(|facts| facts.iter())
            .filter(|fact| fact.valid_at(now))
            .map(|fact| {
                let mut entry = line(format!("- {}", fact.told));
                // What the NPC heard of the player in front of it is about this talk.
                entry.matches |= fact.subject_id == Some(request.player_id);
                FactLine { source_memory_id: fact.source_memory_id, line: entry }
            })
            .collect();
        let mood = data
            .mood
            .as_ref()
            .and_then(|mood| Option::as_ref(mood))
            .filter(|mood| mood.valid_at(now))
            .map(|mood| format!("You are feeling {}.", mood_description(&mood.mood, mood.intensity)));
        let sections = packing::Candidates { relationship, working_memory, memory, recall, knowledge, mood };
        Self { reputation, sections }
    }
}
