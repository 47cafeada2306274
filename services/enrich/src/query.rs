//! The structured query API for game systems that need numbers, not prose:
//! `P.query.relationship`, `P.query.memories`, `P.query.knowledge`, and `P.query.recall`
//! (search one pair's past by text). The request and reply types are in
//! `npcmem_core::wire`.

use chrono::Utc;
use npcmem_core::recall::{self, TurnVectors};

use crate::enricher::QueryEmbedder;
use crate::loader::load_recall;
use npcmem_core::relationship::{Dimension, RelateRules, Relationship, faction_modifier};
use npcmem_core::wire::{
    KnowledgeAnswer, KnowledgeFact, KnowledgeQuery, MemoriesAnswer, MemoriesQuery, MemoryItem, RecallAnswer,
    RecallQuery, RecalledTurn, RelationshipAnswer, RelationshipQuery,
};
use npcmem_store::context::{self as reads, Fact, MemoryFilter};
use npcmem_store::factions::{self, Side};
use npcmem_store::recall::TurnFilter;
use npcmem_store::{PgPool, StoreError, relationships};

pub async fn relationship(
    pool: &PgPool,
    rules: &RelateRules,
    query: &RelationshipQuery,
) -> Result<RelationshipAnswer, StoreError> {
    let mut connection = pool.acquire().await?;
    let pair = (query.npc_id, query.player_id);
    let stored = relationships::load(&mut connection, &[pair]).await?.pop().map(|(_, r)| r);
    let (relationship, has_met) = match stored {
        Some(relationship) if relationship.interaction_count > 0 => (relationship, true),
        _ => {
            // A stranger: the initial values, with the faction modifier when both sides'
            // factions are known.
            let npc_factions = factions::get(&mut connection, Side::Npc, query.npc_id).await?.unwrap_or_default();
            let player_factions =
                factions::get(&mut connection, Side::Player, query.player_id).await?.unwrap_or_default();
            let attitudes = relationships::attitudes(&mut connection, &npc_factions).await?;
            let modifier = faction_modifier(
                &npc_factions,
                &player_factions,
                |faction, toward| attitudes.iter().find(|(f, t, _)| f == faction && t == toward).map(|(_, _, a)| *a),
                rules,
            );
            (Relationship::initial(modifier), false)
        }
    };
    Ok(RelationshipAnswer {
        npc_id: query.npc_id,
        player_id: query.player_id,
        has_met,
        stage: relationship.stage.as_str().to_owned(),
        disposition: relationship.disposition,
        trust: relationship.get(Dimension::Trust),
        fear: relationship.get(Dimension::Fear),
        respect: relationship.get(Dimension::Respect),
        loyalty: relationship.get(Dimension::Loyalty),
        friendliness: relationship.get(Dimension::Friendliness),
        romantic_interest: relationship.get(Dimension::RomanticInterest),
        interaction_count: relationship.interaction_count,
        version: relationship.version,
    })
}

pub async fn memories(pool: &PgPool, query: &MemoriesQuery) -> Result<MemoriesAnswer, StoreError> {
    let mut connection = pool.acquire().await?;
    let filter = MemoryFilter {
        tags: query.tags.clone(),
        min_importance: query.min_importance,
        memory_type: query.memory_type,
        content_contains: query.contains.clone(),
        limit: query.limit.unwrap_or(20).clamp(0, 200),
    };
    let (count, memories) = reads::query_memories(&mut connection, query.npc_id, query.player_id, &filter).await?;
    Ok(MemoriesAnswer {
        count,
        has_memory_matching: count > 0,
        memories: memories
            .into_iter()
            .map(|m| MemoryItem {
                id: m.id,
                memory_type: m.memory_type,
                content: m.content,
                tags: m.tags,
                importance: m.importance,
                locked: m.locked,
                created_at: m.created_at,
            })
            .collect(),
    })
}

pub async fn knowledge(pool: &PgPool, query: &KnowledgeQuery) -> Result<KnowledgeAnswer, StoreError> {
    let mut connection = pool.acquire().await?;
    let limit = query.limit.unwrap_or(20).clamp(0, 200);
    let facts = reads::knowledge(
        &mut connection,
        query.npc_id,
        Utc::now(),
        query.tag.as_deref(),
        query.subject_id,
        None,
        limit,
    )
    .await?;
    let facts: Vec<KnowledgeFact> = facts.into_iter().map(wire_fact).collect();
    Ok(KnowledgeAnswer { knows_fact: !facts.is_empty(), facts })
}

fn wire_fact(fact: Fact) -> KnowledgeFact {
    KnowledgeFact {
        id: fact.id,
        category: fact.category,
        subject_id: fact.subject_id,
        content: fact.content,
        tags: fact.tags,
        confidence: fact.confidence,
        importance: fact.importance,
        source: fact.source,
        told: fact.told,
    }
}

/// One pair's turns matching the filters, ranked by relevance to `text` (or newest first):
/// lexical, fused with dense similarity when an embedder is configured. Scores are
/// BM25 without an embedder and reciprocal-rank fusion scores with one.
pub async fn recall(
    pool: &PgPool,
    max_turns: i64,
    embedder: Option<&QueryEmbedder>,
    query: &RecallQuery,
) -> Result<RecallAnswer, StoreError> {
    let filter = TurnFilter { from: query.from, to: query.to, speaker: query.speaker };
    let text = query.text.clone().filter(|text| !text.trim().is_empty());
    let model = embedder.filter(|_| text.is_some()).map(|embedder| embedder.embedder.model());
    let part = load_recall(pool, (query.npc_id, query.player_id), max_turns, &filter, model).await?;
    let mut degraded = Vec::new();
    let query_vector = match (embedder, &text) {
        (Some(embedder), Some(text)) if part.vectors.as_ref().is_some_and(TurnVectors::any) => {
            embedder.embed(text, &mut degraded, None).await
        }
        _ => None,
    };
    let limit = query.limit.unwrap_or(20).clamp(1, 200) as usize;
    let answer = tokio::task::spawn_blocking(move || {
        let found = &part.turns;
        let ranked: Vec<(usize, Option<f64>)> = match &text {
            Some(text) => {
                let lexical = part.index.search(text);
                let dense = query_vector
                    .as_deref()
                    .zip(part.vectors.as_ref())
                    .map(|(query, vectors)| recall::dense_ranking(query, vectors, found.len()));
                let ranked: Vec<(usize, f64)> = match dense {
                    Some(dense) => {
                        let positions: Vec<usize> = lexical.iter().map(|(position, _)| *position).collect();
                        recall::hybrid_scores(&positions, &dense)
                    }
                    None => lexical,
                };
                ranked.into_iter().map(|(position, score)| (position, Some((score * 1e6).round() / 1e6))).collect()
            }
            None => (0..found.len()).rev().map(|position| (position, None)).collect(),
        };
        let count = ranked.len();
        let turns = ranked
            .into_iter()
            .take(limit)
            .map(|(position, score)| {
                let turn = &found[position];
                RecalledTurn {
                    conversation_id: turn.conversation_id,
                    turn: turn.turn,
                    speaker: turn.speaker,
                    text: turn.text.clone(),
                    said_at: turn.said_at,
                    score,
                }
            })
            .collect();
        RecallAnswer { count, turns, degraded }
    })
    .await
    .map_err(|error| match error.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(_) => StoreError::Unavailable(sqlx::Error::WorkerCrashed),
    })?;
    Ok(answer)
}
