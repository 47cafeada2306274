//! Sentence embedders for recall's dense ranking: any OpenAI-compatible
//! `POST {base_url}/embeddings` endpoint (OpenAI, Ollama's `/v1`, vLLM, the llama.cpp
//! server), or all-MiniLM-L6-v2 run in-process (cargo feature `minilm`).
//!
//! Vectors come back L2-normalised, so a dot product is their cosine.

#[cfg(feature = "minilm")]
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::provider::{LlmConfigError, LlmError, Ungated};
use crate::transport::{self, ClientConfig, Connection};

/// An embedder of either kind; cheap to clone.
#[derive(Clone, Debug)]
pub enum Embedder {
    Http(HttpEmbedder),
    #[cfg(feature = "minilm")]
    Local(Arc<crate::minilm::MiniLm>),
}

impl Embedder {
    /// The model name vectors are stored under: vectors of two models never mix.
    pub fn model(&self) -> &str {
        match self {
            Self::Http(client) => &client.connection.model,
            #[cfg(feature = "minilm")]
            Self::Local(model) => model.name(),
        }
    }

    /// Texts per call given the configured batch: that for an endpoint; up to 4,096 for
    /// the local model, which sorts a call's texts by length before cutting its own
    /// batches, so a long turn pads fewer short ones.
    pub fn call_size(&self, configured: usize) -> usize {
        match self {
            Self::Http(_) => configured.max(1),
            #[cfg(feature = "minilm")]
            Self::Local(_) => configured.max(4_096),
        }
    }

    /// One vector per text, in order. Local inference runs on the blocking pool so it
    /// never stalls the runtime's workers.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut vectors = match self {
            Self::Http(client) => client.embed(texts).await?,
            #[cfg(feature = "minilm")]
            Self::Local(model) => {
                let model = Arc::clone(model);
                let texts = texts.to_vec();
                tokio::task::spawn_blocking(move || model.embed(&texts))
                    .await
                    .map_err(|error| LlmError::InvalidResponse(format!("embedding task failed: {error}")))??
            }
        };
        if vectors.len() != texts.len() {
            return Err(LlmError::InvalidResponse(format!(
                "asked for {} embeddings, got {}",
                texts.len(),
                vectors.len()
            )));
        }
        for vector in &mut vectors {
            normalise(vector);
        }
        Ok(vectors)
    }
}

/// Scales `vector` to unit length (a zero vector stays zero).
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

/// `POST {base_url}/embeddings` with `{"model", "input": [...]}`.
#[derive(Clone, Debug)]
pub struct HttpEmbedder {
    connection: Connection,
}

impl HttpEmbedder {
    /// Checks the configuration; makes no request.
    pub fn new(config: ClientConfig) -> Result<Self, LlmConfigError> {
        let base_url = config.base_url.clone();
        Ok(Self { connection: Connection::new(config, &base_url, "embeddings")? })
    }

    pub fn endpoint(&self) -> &str {
        self.connection.endpoint.as_str()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let body = EmbeddingRequest { model: &self.connection.model, input: texts };
        let request = || {
            let request = self.connection.http.post(self.connection.endpoint.clone()).json(&body);
            match &self.connection.api_key {
                Some(key) => request.bearer_auth(key),
                None => request,
            }
        };
        let retried =
            crate::retry::run(&self.connection.retry, self.connection.timeout, "embeddings", &Ungated, || {
                transport::attempt(request(), parse_embeddings, |_| None)
            })
            .await;
        retried.result
    }
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingDatum>,
}

#[derive(Deserialize)]
struct EmbeddingDatum {
    embedding: Vec<f32>,
    /// Servers may answer out of order; `index` puts them back.
    index: Option<usize>,
}

fn parse_embeddings(body: &[u8]) -> Result<Vec<Vec<f32>>, LlmError> {
    let response: EmbeddingResponse = serde_json::from_slice(body).map_err(|error| transport::invalid_json(&error))?;
    let mut data = response.data;
    if data.iter().all(|datum| datum.index.is_some()) {
        data.sort_by_key(|datum| datum.index);
    }
    let vectors: Vec<Vec<f32>> = data.into_iter().map(|datum| datum.embedding).collect();
    if let Some(first) = vectors.first() {
        if first.is_empty() || vectors.iter().any(|vector| vector.len() != first.len()) {
            return Err(LlmError::InvalidResponse("embeddings are empty or of different lengths".to_owned()));
        }
        if vectors.iter().flatten().any(|x| !x.is_finite()) {
            return Err(LlmError::InvalidResponse("an embedding holds a value that is not a finite number".to_owned()));
        }
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_put_back_in_input_order() {
        let body = br#"{"data":[{"embedding":[0.0,1.0],"index":1},{"embedding":[1.0,0.0],"index":0}]}"#;
        assert_eq!(parse_embeddings(body).unwrap(), vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    }

    #[test]
    fn ragged_or_malformed_replies_are_invalid() {
        for body in [
            &br#"{"data":[{"embedding":[0.0,1.0]},{"embedding":[1.0]}]}"#[..],
            br#"{"data":[{"embedding":[]}]}"#,
            br#"{"vectors":[]}"#,
        ] {
            assert!(matches!(parse_embeddings(body), Err(LlmError::InvalidResponse(_))));
        }
    }

    #[test]
    fn vectors_are_normalised_to_unit_length() {
        let mut vector = vec![3.0, 4.0];
        normalise(&mut vector);
        assert_eq!(vector, vec![0.6, 0.8]);
        let mut zero = vec![0.0, 0.0];
        normalise(&mut zero);
        assert_eq!(zero, vec![0.0, 0.0]);
    }
}
