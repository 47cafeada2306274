//! Whole-world counts for `npcmem stats`: what is stored, how conversations fared, which
//! extractor made the memories, and what the LLM cost per day.

use chrono::NaiveDate;
use serde::Serialize;
use sqlx::PgConnection;

use crate::error::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Count {
    pub key: String,
    pub count: i64,
}

/// LLM tokens of one UTC day, as settled per NPC after each call (the global row is only
/// updated when a replica returns its lease, so it lags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct TokenDay {
    pub day: NaiveDate,
    pub spent: i64,
    pub calls: i64,
    pub npcs: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreStats {
    pub memories_by_type: Vec<Count>,
    pub memories_by_safety_flag: Vec<Count>,
    pub locked_memories: i64,
    pub relationships: i64,
    pub knowledge_facts: i64,
    pub conversations_by_state: Vec<Count>,
    /// Completed extractions by the extractor that ran (`llm`, `rules`), from the ledger.
    pub extractions_by_extractor: Vec<Count>,
    pub tokens_by_day: Vec<TokenDay>,
    pub unreviewed_audit_entries: i64,
}

async fn counts(connection: &mut PgConnection, statement: &'static str) -> StoreResult<Vec<Count>> {
    Ok(sqlx::query_as(statement).fetch_all(connection).await?)
}

async fn scalar(connection: &mut PgConnection, statement: &'static str) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(statement).fetch_one(connection).await?)
}

/// Counts over the whole database; token spend for days on or after `since`. Full-table
/// counts: meant for an operator's occasional look, not for a scrape loop.
pub async fn collect(connection: &mut PgConnection, since: NaiveDate) -> StoreResult<StoreStats> {
    let memories_by_type = counts(
        &mut *connection,
        "SELECT memory_type AS key, count(*) AS count FROM memories GROUP BY memory_type ORDER BY memory_type",
    )
    .await?;
    let memories_by_safety_flag = counts(
        &mut *connection,
        "SELECT safety_flag AS key, count(*) AS count FROM memories GROUP BY safety_flag ORDER BY safety_flag",
    )
    .await?;
    let locked_memories = scalar(&mut *connection, "SELECT count(*) FROM memories WHERE locked").await?;
    let relationships = scalar(&mut *connection, "SELECT count(*) FROM relationships").await?;
    let knowledge_facts = scalar(&mut *connection, "SELECT count(*) FROM knowledge_facts").await?;
    let conversations_by_state = counts(
        &mut *connection,
        "SELECT state AS key, count(*) AS count FROM conversations GROUP BY state ORDER BY state",
    )
    .await?;
    let extractions_by_extractor = counts(
        &mut *connection,
        "SELECT extractor AS key, count(*) AS count FROM conversations
         WHERE extractor IS NOT NULL AND state = 'complete' GROUP BY extractor ORDER BY extractor",
    )
    .await?;
    let tokens_by_day = sqlx::query_as(
        "SELECT day, sum(spent)::int8 AS spent, sum(calls)::int8 AS calls, count(*) AS npcs
         FROM token_budget_usage WHERE scope = 'npc' AND day >= $1 GROUP BY day ORDER BY day",
    )
    .bind(since)
    .fetch_all(&mut *connection)
    .await?;
    let unreviewed_audit_entries =
        scalar(&mut *connection, "SELECT count(*) FROM memory_audit WHERE reviewed_at IS NULL").await?;
    Ok(StoreStats {
        memories_by_type,
        memories_by_safety_flag,
        locked_memories,
        relationships,
        knowledge_facts,
        conversations_by_state,
        extractions_by_extractor,
        tokens_by_day,
        unreviewed_audit_entries,
    })
}
