//! The wire contract without servers: every JSON Schema in `docs/schemas` compiles, each
//! of its examples and every JSON example in the README and `docs/` validates against
//! the schema it names and is read by the Rust type the services use (through the same
//! strict decoder for what game servers send), and the fixtures in `tests/wire/fixtures`
//! — the messages as clients send and receive them today — are still read and written
//! back field for field, so a change that breaks an existing client fails here.
//!
//! The schemas themselves are generated from the Rust types (schemars, draft 2020-12: the
//! doc comments and `#[schemars(...)]` limits of `npcmem_core::wire`, the fixtures as
//! examples); the committed files must be what the types generate. After changing a wire
//! type, write them anew with `NPCMEM_WRITE_SCHEMAS=1 cargo test -p npcmem-tests --test wire`.
//!
//! A fenced ```json block in the docs must follow a `<!-- wire: NAME … -->` line naming
//! the message of each JSON document in it, or `none` for JSON that is not a message.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use npcmem_core::validate::world::decode_world;
use npcmem_core::validate::{ConversationLimits, decode_conversation_ended, decode_message};
use npcmem_core::wire::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}

const MAX_BYTES: usize = 1 << 20;

/// Reads `value` as message `name` the way its consumer does and writes it back.
fn round_trip(name: &str, value: &Value) -> Result<Value, String> {
    fn plain<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
        let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    fn strict<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
        let typed: T = decode_message(value.to_string().as_bytes(), MAX_BYTES).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    fn world<T: validate_world::World>(value: &Value) -> Result<Value, String> {
        let typed: T = decode_world(value.to_string().as_bytes(), MAX_BYTES).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    match name {
        "conversation.ended" => {
            let typed = decode_conversation_ended(value.to_string().as_bytes(), &ConversationLimits::default())
                .map_err(|e| e.to_string())?;
            serde_json::to_value(typed).map_err(|e| e.to_string())
        }
        "world.npc_moved" => world::<NpcMoved>(value),
        "world.npc_profile" => world::<NpcProfile>(value),
        "world.observation" => world::<Observation>(value),
        "world.fact" => world::<WorldFact>(value),
        "world.player_privacy" => strict::<PlayerPrivacy>(value),
        "enrich.request" => strict::<EnrichRequest>(value),
        "query.relationship" => strict::<RelationshipQuery>(value),
        "query.memories" => strict::<MemoriesQuery>(value),
        "query.knowledge" => strict::<KnowledgeQuery>(value),
        "query.recall" => strict::<RecallQuery>(value),
        "query.relationship.reply" => plain::<RelationshipAnswer>(value),
        "query.memories.reply" => plain::<MemoriesAnswer>(value),
        "query.knowledge.reply" => plain::<KnowledgeAnswer>(value),
        "query.recall.reply" => plain::<RecallAnswer>(value),
        "enrich.reply" => plain::<EnrichReply>(value),
        "error-reply" => plain::<ErrorReply>(value),
        "signal" => plain::<Signal>(value),
        "job.extract" => plain::<ExtractJob>(value),
        "job.consolidate" => plain::<ConsolidateJob>(value),
        "event.memory.stored" => plain::<MemoryStored>(value),
        "event.relationship.changed" => plain::<RelationshipChanged>(value),
        "event.knowledge.learned" => plain::<KnowledgeLearned>(value),
        "cache.invalidate" => plain::<CacheInvalidate>(value),
        "control.changed" => plain::<ControlChanged>(value),
        other => Err(format!("no Rust type is known for message {other}")),
    }
}

mod validate_world {
    /// The world messages `decode_world` reads.
    pub trait World:
        serde::de::DeserializeOwned + serde::Serialize + npcmem_core::validate::world::WorldMessage
    {
    }
    impl<T: serde::de::DeserializeOwned + serde::Serialize + npcmem_core::validate::world::WorldMessage> World for T {}
}

/// Every field of `sent` comes back with the same value (numbers compared as numbers);
/// fields the type adds (defaults) are allowed. Returns the first difference.
fn missing(sent: &Value, back: &Value, path: &str) -> Option<String> {
    match (sent, back) {
        (Value::Object(sent), Value::Object(back)) => sent.iter().find_map(|(key, value)| {
            let at = format!("{path}.{key}");
            match back.get(key) {
                Some(other) => missing(value, other, &at),
                // An absent key reads as null, and the type may leave a null out.
                None if value.is_null() => None,
                None => Some(format!("{at} is dropped")),
            }
        }),
        (Value::Array(sent), Value::Array(back)) if sent.len() == back.len() => {
            sent.iter().zip(back).enumerate().find_map(|(i, (a, b))| missing(a, b, &format!("{path}[{i}]")))
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        (a, b) if a == b => None,
        (a, b) => Some(format!("{path}: sent {a}, read back as {b}")),
    }
}

/// The schema of each message in `docs/schemas`, generated from its Rust type.
fn generated_schemas() -> Vec<(&'static str, Value)> {
    fn schema<T: schemars::JsonSchema>() -> Value {
        schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>().to_value()
    }
    let mut schemas = vec![
        ("cache.invalidate", schema::<CacheInvalidate>()),
        ("control.changed", schema::<ControlChanged>()),
        ("conversation.ended", schema::<ConversationEnded>()),
        ("enrich.reply", schema::<EnrichReply>()),
        ("enrich.request", schema::<EnrichRequest>()),
        ("error-reply", schema::<ErrorReply>()),
        ("event.knowledge.learned", schema::<KnowledgeLearned>()),
        ("event.memory.stored", schema::<MemoryStored>()),
        ("event.relationship.changed", schema::<RelationshipChanged>()),
        ("job.consolidate", schema::<ConsolidateJob>()),
        ("job.extract", schema::<ExtractJob>()),
        ("query.knowledge", schema::<KnowledgeQuery>()),
        ("query.knowledge.reply", schema::<KnowledgeAnswer>()),
        ("query.memories", schema::<MemoriesQuery>()),
        ("query.memories.reply", schema::<MemoriesAnswer>()),
        ("query.recall", schema::<RecallQuery>()),
        ("query.recall.reply", schema::<RecallAnswer>()),
        ("query.relationship", schema::<RelationshipQuery>()),
        ("query.relationship.reply", schema::<RelationshipAnswer>()),
        ("signal", schema::<Signal>()),
        ("world.fact", schema::<WorldFact>()),
        ("world.npc_moved", schema::<NpcMoved>()),
        ("world.npc_profile", schema::<NpcProfile>()),
        ("world.observation", schema::<Observation>()),
        ("world.player_privacy", schema::<PlayerPrivacy>()),
    ];
    let fixtures = repository().join("tests/wire/fixtures");
    for (name, schema) in &mut schemas {
        unwrap_descriptions(schema);
        let examples: Vec<Value> = std::fs::read_to_string(fixtures.join(format!("{name}.jsonl")))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).expect("a fixture is JSON"))
            .collect();
        let object = schema.as_object_mut().expect("a schema object");
        object.insert("$id".into(), Value::String(format!("{name}.schema.json")));
        object.insert("title".into(), Value::String(name.to_string()));
        object.insert("examples".into(), Value::Array(examples));
    }
    schemas
}

/// Doc comments are wrapped for the source; a description reads as one paragraph.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, inner) in object.iter_mut() {
                match inner {
                    Value::String(text) if key == "description" => {
                        *text = text.split("\n\n").map(|p| p.replace('\n', " ")).collect::<Vec<_>>().join("\n\n");
                    }
                    _ => unwrap_descriptions(inner),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

#[test]
fn the_committed_schemas_are_the_ones_the_rust_types_generate() {
    let dir = repository().join("docs/schemas");
    let write = std::env::var_os("NPCMEM_WRITE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    let generated = generated_schemas();
    for (name, schema) in &generated {
        let path = dir.join(format!("{name}.schema.json"));
        let text = serde_json::to_string_pretty(schema).unwrap() + "\n";
        if write {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    let committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".schema.json").to_string())
        .filter(|name| !generated.iter().any(|(generated, _)| generated == name))
        .collect();
    assert!(committed.is_empty(), "schemas no Rust type generates: {committed:?}");
    assert!(
        stale.is_empty(),
        "these schemas differ from what the Rust types generate: {stale:?}; write them anew with \
         NPCMEM_WRITE_SCHEMAS=1 cargo test -p npcmem-tests --test wire"
    );
}

/// The schemas by message name (`conversation.ended` for conversation.ended.schema.json).
struct Schemas {
    schemas: boon::Schemas,
    index: BTreeMap<String, boon::SchemaIndex>,
    documents: BTreeMap<String, Value>,
}

impl Schemas {
    fn load() -> Self {
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.enable_format_assertions();
        let mut index = BTreeMap::new();
        let mut documents = BTreeMap::new();
        let dir = repository().join("docs/schemas");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().trim_end_matches(".schema.json").to_string();
            let document: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            let url = format!("file://{}", path.display());
            compiler.add_resource(&url, document.clone()).unwrap();
            let compiled = compiler.compile(&url, &mut schemas).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            index.insert(name.clone(), compiled);
            documents.insert(name, document);
        }
        Schemas { schemas, index, documents }
    }

    /// Validates against the named schema where there is one.
    fn check(&self, name: &str, value: &Value) -> Result<(), String> {
        match self.index.get(name) {
            Some(schema) => self.schemas.validate(value, *schema).map_err(|e| format!("{e:#}")),
            None => Ok(()),
        }
    }
}

/// Checks one example of message `name`: its schema, its Rust type, the round trip.
fn check_example(schemas: &Schemas, name: &str, value: &Value, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(error) = schemas.check(name, value) {
        problems.push(format!("{origin}: not valid against {name}.schema.json: {error}"));
    }
    match round_trip(name, value) {
        Ok(back) => {
            if let Some(difference) = missing(value, &back, "$") {
                problems.push(format!("{origin}: {name} does not survive the Rust type: {difference}"));
            }
        }
        Err(error) => problems.push(format!("{origin}: the Rust type of {name} refuses it: {error}")),
    }
    problems
}

/// The fenced JSON blocks of a Markdown file with the message names their marker gives.
fn json_blocks(path: &Path) -> Vec<(usize, Vec<String>, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        if lines[at].trim_start().starts_with("```json") {
            let marker = at.checked_sub(1).map(|i| lines[i].trim()).unwrap_or("");
            let names = marker
                .strip_prefix("<!-- wire:")
                .and_then(|rest| rest.strip_suffix("-->"))
                .map(|names| names.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default();
            let end = (at + 1..lines.len()).find(|&i| lines[i].trim_start().starts_with("```")).unwrap_or(lines.len());
            blocks.push((at + 1, names, lines[at + 1..end].join("\n")));
            at = end;
        }
        at += 1;
    }
    blocks
}

#[test]
fn every_schema_compiles_and_its_examples_are_read_by_the_rust_type() {
    let schemas = Schemas::load();
    assert!(schemas.index.len() >= 17, "the schemas: {:?}", schemas.index.keys());
    let mut problems = Vec::new();
    for (name, document) in &schemas.documents {
        let examples = document["examples"].as_array().cloned().unwrap_or_default();
        assert!(!examples.is_empty(), "{name}.schema.json has no example");
        for (i, example) in examples.iter().enumerate() {
            problems.extend(check_example(&schemas, name, example, &format!("{name}.schema.json examples[{i}]")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_json_example_in_the_docs_names_its_message_and_is_valid() {
    let schemas = Schemas::load();
    let mut files = vec![repository().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repository().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let (mut problems, mut checked) = (Vec::new(), 0);
    for file in &files {
        let shown = file.strip_prefix(repository()).unwrap().display().to_string();
        for (line, names, block) in json_blocks(file) {
            let origin = format!("{shown}:{line}");
            if names.is_empty() {
                problems.push(format!("{origin}: a json block without a <!-- wire: NAME --> line before it"));
                continue;
            }
            let documents: Vec<Value> = match serde_json::Deserializer::from_str(&block).into_iter().collect() {
                Ok(documents) => documents,
                Err(error) => {
                    problems.push(format!("{origin}: not JSON: {error}"));
                    continue;
                }
            };
            if names == ["none"] {
                continue;
            }
            if names.len() != documents.len() {
                problems.push(format!("{origin}: {} names for {} JSON documents", names.len(), documents.len()));
                continue;
            }
            for (name, document) in names.iter().zip(&documents) {
                checked += 1;
                problems.extend(check_example(&schemas, name, document, &origin));
            }
        }
    }
    assert!(checked >= 10, "the docs' examples were found ({checked})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn messages_as_clients_send_and_read_them_today_still_round_trip() {
    let schemas = Schemas::load();
    let dir = repository().join("tests/wire/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    let (mut problems, mut checked) = (Vec::new(), 0);
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().trim_end_matches(".jsonl").to_string();
        for (i, line) in
            std::fs::read_to_string(path).unwrap().lines().enumerate().filter(|(_, l)| !l.trim().is_empty())
        {
            let value: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1));
            checked += 1;
            problems.extend(check_example(&schemas, &name, &value, &format!("fixtures/{name}.jsonl:{}", i + 1)));
        }
    }
    assert!(checked >= 25, "fixtures found: {checked}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_renamed_field_is_caught() {
    // The check itself: a client's field the type no longer writes back is reported.
    let schemas = Schemas::load();
    let mut example = schemas.documents["world.npc_moved"]["examples"][0].clone();
    example["room"] = example["room_id"].take();
    example.as_object_mut().unwrap().remove("room_id");
    assert!(!check_example(&schemas, "world.npc_moved", &example, "renamed").is_empty());
    let dropped = serde_json::json!({"schema_version": 1, "conversation_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10", "priority": 3});
    assert_eq!(
        missing(&dropped, &round_trip("job.extract", &dropped).unwrap(), "$"),
        Some("$.priority is dropped".into())
    );
}
