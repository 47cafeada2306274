//! all-MiniLM-L6-v2 run in-process on the CPU with candle: the sentence-transformers
//! pipeline (BERT, attention-mask mean pooling, L2 normalisation) without a server.
//!
//! The model directory is the one sentence-transformers ships (`deploy/local/fetch-model`
//! unpacks it): `config.json`, `tokenizer.json` and `model.safetensors`.

use std::fmt;
use std::path::Path;

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use crate::provider::{LlmConfigError, LlmError};

/// The name vectors of this model are stored under.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// Width of every vector.
pub const DIMENSION: usize = 384;
/// sentence-transformers' `max_seq_length` for this model (special tokens included); the
/// tokenizer.json it ships says 128, which is not what the model was trained and
/// evaluated with.
pub const MAX_TOKENS: usize = 256;
/// Texts run through BERT together. sentence-transformers' default; sorting by length
/// first keeps the padding in each batch small.
const BATCH: usize = 32;

/// The tokenizer and weights, loaded once; `embed` takes `&self`, so one instance can
/// serve every thread.
pub struct MiniLm {
    tokenizer: Tokenizer,
    model: BertModel,
}

impl fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MiniLm").field("name", &MODEL_NAME).field("dimension", &DIMENSION).finish_non_exhaustive()
    }
}

impl MiniLm {
    /// Loads config.json, tokenizer.json and model.safetensors from a sentence-transformers model directory.
    pub fn load(dir: &Path) -> Result<Self, LlmConfigError> {
        let unusable = |file: &str, error: &dyn fmt::Display| {
            LlmConfigError::LocalModel(format!("{}: {error}", dir.join(file).display()))
        };

        let config = std::fs::read(dir.join("config.json")).map_err(|error| unusable("config.json", &error))?;
        let config: Config = serde_json::from_slice(&config).map_err(|error| unusable("config.json", &error))?;
        // Vectors are stored under MODEL_NAME, so another BERT in this directory must not
        // pass for it (the width is the cheapest tell).
        if config.hidden_size != DIMENSION {
            let error = format!("hidden_size is {}, all-MiniLM-L6-v2 has {DIMENSION}", config.hidden_size);
            return Err(unusable("config.json", &error));
        }

        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|error| unusable("tokenizer.json", &error))?;
        // Padding is done per batch in `embed_batch`; the file's fixed 128-token padding
        // would waste most of the work on short texts.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..TruncationParams::default() }))
            .map_err(|error| unusable("tokenizer.json", &error))?;

        // Read into memory rather than mmap: a file changed under a mapping is undefined
        // behaviour, and 90 MB is cheap.
        let weights = dir.join("model.safetensors");
        let tensors = candle_core::safetensors::load(&weights, &Device::Cpu)
            .map_err(|error| unusable("model.safetensors", &error))?;
        let weights = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        // BertModel::load accepts names with or without the `bert.` prefix.
        let model = BertModel::load(weights, &config).map_err(|error| unusable("model.safetensors", &error))?;
        Ok(Self { tokenizer, model })
    }

    pub fn name(&self) -> &str {
        MODEL_NAME
    }

    /// One 384-dim vector per text: tokenise (truncate at 256 tokens, pad the batch), BERT forward, attention-mask mean pooling (as sentence-transformers does), L2-normalised.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.iter().map(String::as_str).collect(), true)
            .map_err(|error| failed(&error))?;
        // Longest first, like sentence-transformers, so texts of like length share a batch.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&index| std::cmp::Reverse(encodings[index].len()));

        let mut vectors = vec![Vec::new(); encodings.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&Encoding> = chunk.iter().map(|&index| &encodings[index]).collect();
            for (&index, vector) in chunk.iter().zip(self.embed_batch(&batch).map_err(|error| failed(&error))?) {
                vectors[index] = vector;
            }
        }
        for vector in &mut vectors {
            crate::embed::normalise(vector);
        }
        Ok(vectors)
    }

    fn embed_batch(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let width = batch.iter().map(|encoding| encoding.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(batch.len() * width);
        let mut mask = Vec::with_capacity(batch.len() * width);
        for encoding in batch {
            let padding = width - encoding.len();
            ids.extend_from_slice(encoding.get_ids());
            // [PAD] is id 0 in this vocabulary; masked out either way.
            ids.extend(std::iter::repeat_n(0, padding));
            mask.extend_from_slice(encoding.get_attention_mask());
            mask.extend(std::iter::repeat_n(0, padding));
        }
        let shape = (batch.len(), width);
        let ids = Tensor::from_vec(ids, shape, &Device::Cpu)?;
        let mask = Tensor::from_vec(mask, shape, &Device::Cpu)?;
        // One segment: every token type is 0.
        let token_types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &token_types, Some(&mask))?;

        // Mean over the real tokens only; the clamp guards a row with no tokens at all,
        // which [CLS] and [SEP] rule out but costs nothing to keep safe.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
        let sums = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9, f32::MAX)?;
        sums.broadcast_div(&counts)?.to_vec2::<f32>()
    }
}

fn failed(error: &dyn fmt::Display) -> LlmError {
    LlmError::InvalidResponse(format!("{MODEL_NAME} failed: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_one_instance_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MiniLm>();
    }

    #[test]
    fn a_missing_directory_is_a_config_error() {
        let error = MiniLm::load(Path::new("/nonexistent/all-MiniLM-L6-v2")).unwrap_err();
        assert!(matches!(&error, LlmConfigError::LocalModel(message) if message.contains("config.json")), "{error}");
    }
}
