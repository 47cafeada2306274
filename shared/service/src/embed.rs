//! Recall's embedder settings (extract embeds new conversations, enrich embeds the
//! question, `npcmem recall backfill` embeds history) and the one routine that turns
//! conversations into stored vectors.

use std::path::PathBuf;
use std::time::Duration;

use npcmem_llm::{ClientConfig, Embedder, HttpEmbedder, LlmError, RetrySettings};
use npcmem_store::recall::{self as turns, ConversationVectors, Unembedded};
use npcmem_store::{PgPool, StoreError};

use crate::ServiceError;

/// Which embedder gives recall its dense ranking; `none` leaves recall lexical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedProvider {
    None,
    /// Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, llama.cpp).
    Openai,
    /// all-MiniLM-L6-v2 in-process from `NPCMEM_EMBED_MODEL_PATH` (cargo feature `minilm`).
    Minilm,
}

#[derive(Clone, clap::Args)]
pub struct EmbedArgs {
    #[arg(long, env = "NPCMEM_EMBED_PROVIDER", value_enum, default_value = "none")]
    pub embed_provider: EmbedProvider,
    /// Includes the version: `http://127.0.0.1:11434/v1` (Ollama), `https://api.openai.com/v1`.
    #[arg(long, env = "NPCMEM_EMBED_BASE_URL")]
    pub embed_base_url: Option<String>,
    #[arg(long, env = "NPCMEM_EMBED_API_KEY", hide_env_values = true)]
    pub embed_api_key: Option<String>,
    /// Required with openai; vectors are stored under this name.
    #[arg(long, env = "NPCMEM_EMBED_MODEL")]
    pub embed_model: Option<String>,
    /// A sentence-transformers directory (config.json, tokenizer.json, model.safetensors).
    #[arg(long, env = "NPCMEM_EMBED_MODEL_PATH")]
    pub embed_model_path: Option<PathBuf>,
    /// Bound on one batch call by the workers and the backfill.
    #[arg(long, env = "NPCMEM_EMBED_TIMEOUT_MS", default_value_t = 30_000)]
    pub embed_timeout_ms: u64,
    /// Bound on embedding enrich's question; past it recall is lexical and `degraded` says so.
    #[arg(long, env = "NPCMEM_EMBED_QUERY_TIMEOUT_MS", default_value_t = 50)]
    pub embed_query_timeout_ms: u64,
    /// Turns per embedding call.
    #[arg(long, env = "NPCMEM_EMBED_BATCH", default_value_t = 64)]
    pub embed_batch: usize,
    /// Extract: committed batches waiting for the embedder, at most; beyond it a batch
    /// is left for `npcmem recall backfill` (extraction never waits for the embedder).
    #[arg(long, env = "NPCMEM_EMBED_QUEUE_BATCHES", default_value_t = 4)]
    pub embed_queue_batches: usize,
}

/// Hand-written so the API key never reaches a log.
impl std::fmt::Debug for EmbedArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbedArgs")
            .field("embed_provider", &self.embed_provider)
            .field("embed_base_url", &self.embed_base_url)
            .field("embed_api_key", &self.embed_api_key.as_ref().map(|_| "<redacted>"))
            .field("embed_model", &self.embed_model)
            .field("embed_model_path", &self.embed_model_path)
            .field("embed_timeout_ms", &self.embed_timeout_ms)
            .field("embed_query_timeout_ms", &self.embed_query_timeout_ms)
            .field("embed_batch", &self.embed_batch)
            .field("embed_queue_batches", &self.embed_queue_batches)
            .finish()
    }
}

impl EmbedArgs {
    pub fn validate(&self) -> Result<(), ServiceError> {
        let invalid = |message: &str| Err(ServiceError::Config(message.to_owned()));
        match self.embed_provider {
            EmbedProvider::None => {}
            EmbedProvider::Openai => {
                if self.embed_model.as_deref().is_none_or(|model| model.trim().is_empty()) {
                    return invalid("NPCMEM_EMBED_MODEL is required with NPCMEM_EMBED_PROVIDER openai");
                }
                if self.embed_base_url.is_none() {
                    return invalid("NPCMEM_EMBED_BASE_URL is required with NPCMEM_EMBED_PROVIDER openai");
                }
            }
            EmbedProvider::Minilm => {
                if self.embed_model_path.is_none() {
                    return invalid("NPCMEM_EMBED_MODEL_PATH is required with NPCMEM_EMBED_PROVIDER minilm");
                }
            }
        }
        if self.embed_timeout_ms == 0 || self.embed_query_timeout_ms == 0 {
            return invalid("NPCMEM_EMBED_TIMEOUT_MS and NPCMEM_EMBED_QUERY_TIMEOUT_MS must be positive");
        }
        if !(1..=2048).contains(&self.embed_batch) {
            return invalid("NPCMEM_EMBED_BATCH must be 1..=2048");
        }
        if !(1..=100_000).contains(&self.embed_queue_batches) {
            return invalid("NPCMEM_EMBED_QUEUE_BATCHES must be 1..=100000");
        }
        Ok(())
    }

    /// The configured embedder (the local model is loaded here), or None.
    pub fn embedder(&self) -> Result<Option<Embedder>, ServiceError> {
        let config_error = |error: npcmem_llm::LlmConfigError| ServiceError::Config(error.to_string());
        match self.embed_provider {
            EmbedProvider::None => Ok(None),
            EmbedProvider::Openai => {
                let config = ClientConfig {
                    base_url: self.embed_base_url.clone().unwrap_or_default(),
                    api_key: self.embed_api_key.clone(),
                    model: self.embed_model.clone().unwrap_or_default(),
                    timeout: Duration::from_millis(self.embed_timeout_ms),
                    // One attempt: a slow embedder is skipped, and the backfill catches up.
                    retry: RetrySettings { max_attempts: 1, ..RetrySettings::default() },
                };
                Ok(Some(Embedder::Http(HttpEmbedder::new(config).map_err(config_error)?)))
            }
            EmbedProvider::Minilm => self.local_embedder(),
        }
    }

    #[cfg(feature = "minilm")]
    fn local_embedder(&self) -> Result<Option<Embedder>, ServiceError> {
        let path = self.embed_model_path.clone().unwrap_or_default();
        let model = npcmem_llm::minilm::MiniLm::load(&path)
            .map_err(|error| ServiceError::Config(format!("NPCMEM_EMBED_MODEL_PATH {}: {error}", path.display())))?;
        Ok(Some(Embedder::Local(std::sync::Arc::new(model))))
    }

    #[cfg(not(feature = "minilm"))]
    fn local_embedder(&self) -> Result<Option<Embedder>, ServiceError> {
        Err(ServiceError::Config(
            "NPCMEM_EMBED_PROVIDER minilm needs a build with the cargo feature `minilm`".to_owned(),
        ))
    }

    /// These settings as the environment a service reads them from (to start one with them).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let provider = match self.embed_provider {
            EmbedProvider::None => "none",
            EmbedProvider::Openai => "openai",
            EmbedProvider::Minilm => "minilm",
        };
        let mut env = vec![
            ("NPCMEM_EMBED_PROVIDER", provider.to_owned()),
            ("NPCMEM_EMBED_TIMEOUT_MS", self.embed_timeout_ms.to_string()),
            ("NPCMEM_EMBED_QUERY_TIMEOUT_MS", self.embed_query_timeout_ms.to_string()),
            ("NPCMEM_EMBED_BATCH", self.embed_batch.to_string()),
            ("NPCMEM_EMBED_QUEUE_BATCHES", self.embed_queue_batches.to_string()),
        ];
        let optional = [
            ("NPCMEM_EMBED_BASE_URL", self.embed_base_url.clone()),
            ("NPCMEM_EMBED_API_KEY", self.embed_api_key.clone()),
            ("NPCMEM_EMBED_MODEL", self.embed_model.clone()),
            ("NPCMEM_EMBED_MODEL_PATH", self.embed_model_path.as_ref().map(|path| path.display().to_string())),
        ];
        env.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value?))));
        env
    }

    pub fn query_timeout(&self) -> Duration {
        Duration::from_millis(self.embed_query_timeout_ms)
    }
}

/// Why a round of embedding stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbedFailure {
    #[error("embedder: {0}")]
    Embedder(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Embeds every turn of `conversations`, `batch` turns per call, and stores the vectors;
/// returns the turns embedded. Stops at the first failed call (what was stored stays).
pub async fn embed_conversations(
    pool: &PgPool,
    embedder: &Embedder,
    conversations: Vec<Unembedded>,
    batch: usize,
) -> Result<usize, EmbedFailure> {
    let batch = embedder.call_size(batch);
    let mut pending: Vec<(ConversationVectors, usize)> = Vec::with_capacity(conversations.len());
    let mut texts: Vec<String> = Vec::with_capacity(batch);
    let mut vectors: Vec<Vec<f32>> = Vec::new();
    for conversation in conversations {
        let count = conversation.texts.len();
        for text in conversation.texts {
            texts.push(text);
            if texts.len() == batch {
                vectors.extend(embedder.embed(&texts).await?);
                texts.clear();
            }
        }
        let row = ConversationVectors {
            conversation_id: conversation.conversation_id,
            npc_id: conversation.npc_id,
            player_id: conversation.player_id,
            vectors: Vec::with_capacity(count),
        };
        pending.push((row, count));
    }
    vectors.extend(embedder.embed(&texts).await?);
    let mut vectors = vectors.into_iter();
    let mut rows = Vec::with_capacity(pending.len());
    let mut embedded = 0;
    for (mut row, count) in pending {
        row.vectors.extend(vectors.by_ref().take(count));
        embedded += count;
        rows.push(row);
    }
    let mut connection = pool.acquire().await.map_err(StoreError::from)?;
    turns::save_vectors(&mut connection, embedder.model(), &rows).await?;
    Ok(embedded)
}
