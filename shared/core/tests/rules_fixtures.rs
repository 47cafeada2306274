//! The rules extractor against the shipped fixture conversations
//! (`tests/fixtures/rules/*.json`): each lists exactly the memories that must come out,
//! most important first.

use std::path::PathBuf;

use npcmem_core::extraction::rules::RulesExtractor;
use npcmem_core::wire::ConversationEnded;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    conversation: ConversationEnded,
    expected: Vec<Expected>,
}

#[derive(Deserialize)]
struct Expected {
    tags_include: Vec<String>,
    content_contains: Vec<String>,
    valence: String,
    importance_min: f64,
    importance_max: f64,
}

#[test]
fn every_fixture_yields_exactly_its_expected_memories() {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rules");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("the fixture directory exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "at least 30 fixtures, found {}", paths.len());
    let mut failures = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).expect("fixture readable");
        let fixture: Fixture = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: bad fixture: {e}"));
        let memories = RulesExtractor::shared().extract(&fixture.conversation);
        if memories.len() != fixture.expected.len() {
            failures.push(format!("{name}: expected {} memories, got {:#?}", fixture.expected.len(), memories));
            continue;
        }
        for (index, (memory, expected)) in memories.iter().zip(&fixture.expected).enumerate() {
            let mut problems = Vec::new();
            for tag in &expected.tags_include {
                if !memory.tags.contains(tag) {
                    problems.push(format!("missing tag {tag:?}"));
                }
            }
            for fragment in &expected.content_contains {
                if !memory.content.to_lowercase().contains(&fragment.to_lowercase()) {
                    problems.push(format!("content lacks {fragment:?}"));
                }
            }
            if memory.emotional_valence.as_str() != expected.valence {
                problems.push(format!("valence {} != {}", memory.emotional_valence.as_str(), expected.valence));
            }
            if !(expected.importance_min..=expected.importance_max).contains(&memory.importance) {
                problems.push(format!(
                    "importance {} outside {}..={}",
                    memory.importance, expected.importance_min, expected.importance_max
                ));
            }
            if !problems.is_empty() {
                failures.push(format!("{name} memory {index}: {} in {memory:?}", problems.join(", ")));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} fixtures failed:\n{}", failures.len(), paths.len(), failures.join("\n"));
}
