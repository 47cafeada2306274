//! all-MiniLM-L6-v2 in-process against the real weights. Needs the model directory:
//! `deploy/local/fetch-model`, or `NPCMEM_TEST_MINILM_PATH` pointing at one.
#![cfg(feature = "minilm")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use npcmem_llm::minilm::{DIMENSION, MiniLm};

/// Loaded once: parsing 90 MB of weights per test would dominate the run.
fn model() -> &'static MiniLm {
    static MODEL: OnceLock<MiniLm> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = std::env::var_os("NPCMEM_TEST_MINILM_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.local/models/all-MiniLM-L6-v2"));
        // Fail, not skip: a feature test that passes without its model proves nothing.
        assert!(
            dir.join("model.safetensors").is_file(),
            "no all-MiniLM-L6-v2 at {}: run deploy/local/fetch-model (or set NPCMEM_TEST_MINILM_PATH)",
            dir.display()
        );
        MiniLm::load(&dir).unwrap_or_else(|error| panic!("{error}"))
    })
}

fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    let texts: Vec<String> = texts.iter().map(|text| (*text).to_owned()).collect();
    model().embed(&texts).unwrap()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn assert_unit_vectors(vectors: &[Vec<f32>]) {
    for vector in vectors {
        assert_eq!(vector.len(), DIMENSION);
        let norm = dot(vector, vector).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

fn assert_starts_with(vector: &[f32], expected: &[f32]) {
    for (index, (got, want)) in vector.iter().zip(expected).enumerate() {
        assert!(
            (got - want).abs() < 1e-3,
            "component {index}: got {got}, want {want} (vector starts {:?})",
            &vector[..5]
        );
    }
}

fn long_text() -> String {
    // About 400 tokens, well past the 256 the model keeps.
    vec!["The quick brown fox jumps over the lazy dog."; 40].join(" ")
}

#[test]
fn similar_sentences_are_closer() {
    let vectors = embed(&["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]);
    assert_eq!(vectors.len(), 3);
    assert_unit_vectors(&vectors);
    let (bread, horse) = (dot(&vectors[0], &vectors[1]), dot(&vectors[0], &vectors[2]));
    assert!(bread > horse, "food~bread {bread} should exceed food~horse {horse}");
}

// References: the first five components from sentence-transformers 5.x on torch 2.15
// (CPU), as `SentenceTransformer(<fetched dir>).encode([text], normalize_embeddings=True)`;
// a float64 numpy re-implementation of the BERT forward gave the same digits.

#[test]
fn matches_sentence_transformers() {
    let vectors = embed(&["A man is eating food."]);
    assert_unit_vectors(&vectors);
    assert_starts_with(&vectors[0], &[0.033242, 0.004406, -0.006277, 0.048379, -0.138702]);
}

#[test]
fn empty_and_overlong_texts_embed() {
    // Apart, not in one batch: the empty text padded to 256 tokens would double the cost
    // of an unoptimised test build for nothing the batching test does not cover.
    let empty = embed(&[""]);
    let long = embed(&[&long_text()]);
    assert_unit_vectors(&empty);
    assert_unit_vectors(&long);
    assert_starts_with(&empty[0], &[-0.118838, 0.048299, -0.002548, -0.011011, 0.051951]);
    // Matching here means the text was cut at 256 tokens, as sentence-transformers cuts it
    // (the tokenizer.json in the model directory says 128).
    assert_starts_with(&long[0], &[0.062278, -0.057863, 0.072326, -0.005959, -0.045387]);
    assert!(model().embed(&[]).unwrap().is_empty());
}

#[test]
fn order_and_batching_do_not_change_vectors() {
    // One more text than an internal batch holds, of mixed lengths, so sorting, splitting
    // and padding all happen; short ones keep the unoptimised test build quick.
    let texts: Vec<String> =
        (0..33).map(|index| format!("Sentence number {index}{}", " and more".repeat(index % 5))).collect();
    let together = model().embed(&texts).unwrap();
    for index in [0, 4, 31, 32] {
        let alone = model().embed(&texts[index..=index]).unwrap();
        assert!(dot(&together[index], &alone[0]) > 0.9999, "text {index} differs when batched");
    }
}

/// Throughput for batches of 32 sentences of about 15 words. Run with a release build:
/// `cargo test --release -p npcmem-llm --features minilm --test minilm -- --ignored --nocapture`,
/// and `RAYON_NUM_THREADS=1` for one thread.
#[test]
#[ignore = "a measurement, not a check; run in release"]
fn throughput() {
    let texts: Vec<String> = (0..32)
        .map(|index| {
            format!("The innkeeper number {index} told the travelling merchant that the northern road was closed again today")
        })
        .collect();
    model().embed(&texts).unwrap(); // warm-up
    let rounds = 10;
    let start = Instant::now();
    for _ in 0..rounds {
        model().embed(&texts).unwrap();
    }
    let rate = (rounds * texts.len()) as f64 / start.elapsed().as_secs_f64();
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "default".to_owned());
    println!("all-MiniLM-L6-v2: {rate:.0} embeddings/s (batches of 32, ~15 words, threads: {threads})");
}
