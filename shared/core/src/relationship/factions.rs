//! The factions file (TOML): the world's factions, how each regards the others, and
//! optionally which NPCs belong to which. Loaded by `npcmem factions load FILE` and by
//! relate's `NPCMEM_FACTIONS_FILE`; see `deploy/examples/factions.toml`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use uuid::Uuid;

use super::rules::Attitude;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactionsFile {
    #[serde(default, rename = "faction")]
    pub factions: Vec<Faction>,
    #[serde(default, rename = "npc")]
    pub npcs: Vec<NpcMembership>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faction {
    /// The id conversations and profiles carry, e.g. `city_guard`.
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Faction id → how this faction regards it.
    #[serde(default)]
    pub attitudes: BTreeMap<String, Attitude>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NpcMembership {
    pub id: Uuid,
    pub factions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FactionsFileError {
    #[error("factions file is not valid: {0}")]
    Parse(String),
    #[error("factions file: {0}")]
    Invalid(String),
}

impl FactionsFile {
    pub fn from_toml(text: &str) -> Result<Self, FactionsFileError> {
        let file: FactionsFile = toml::from_str(text).map_err(|error| FactionsFileError::Parse(error.to_string()))?;
        file.validate()?;
        Ok(file)
    }

    /// Ids are tokens (letters, digits, `_`, `-`), unique; attitudes and memberships name
    /// defined factions, and no faction has an attitude toward itself.
    pub fn validate(&self) -> Result<(), FactionsFileError> {
        let invalid = |message: String| Err(FactionsFileError::Invalid(message));
        let valid_id = |id: &str| {
            !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        let mut defined = BTreeSet::new();
        for faction in &self.factions {
            if !valid_id(&faction.id) {
                return invalid(format!("faction id {:?} must be 1–64 letters, digits, '_' or '-'", faction.id));
            }
            if !defined.insert(faction.id.as_str()) {
                return invalid(format!("faction {} is defined twice", faction.id));
            }
            if faction.name.trim().is_empty() {
                return invalid(format!("faction {} has an empty name", faction.id));
            }
        }
        for faction in &self.factions {
            for toward in faction.attitudes.keys() {
                if !defined.contains(toward.as_str()) {
                    return invalid(format!(
                        "faction {} has an attitude toward undefined faction {toward}",
                        faction.id
                    ));
                }
                if toward == &faction.id {
                    return invalid(format!("faction {} has an attitude toward itself", faction.id));
                }
            }
        }
        for npc in &self.npcs {
            if let Some(unknown) = npc.factions.iter().find(|faction| !defined.contains(faction.as_str())) {
                return invalid(format!("npc {} belongs to undefined faction {unknown}", npc.id));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_world_loads() {
        let file = FactionsFile::from_toml(include_str!("../../../../deploy/examples/factions.toml"))
            .expect("the shipped example is valid");
        assert!(file.factions.len() >= 4);
        let guard = file.factions.iter().find(|f| f.id == "city_guard").expect("the guard");
        assert_eq!(guard.attitudes.get("thieves_guild"), Some(&Attitude::Hostile));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let undefined = "[[faction]]\nid = \"a\"\nname = \"A\"\nattitudes = { b = \"hostile\" }\n";
        assert_eq!(
            FactionsFile::from_toml(undefined).unwrap_err().to_string(),
            "factions file: faction a has an attitude toward undefined faction b"
        );
        let bad_attitude = "[[faction]]\nid = \"a\"\nname = \"A\"\n[[faction]]\nid = \"b\"\nname = \"B\"\nattitudes = { a = \"furious\" }\n";
        assert!(FactionsFile::from_toml(bad_attitude).unwrap_err().to_string().contains("furious"));
        assert!(FactionsFile::from_toml("[[faction]]\nid = \"a b\"\nname = \"A\"\n").is_err());
        assert!(FactionsFile::from_toml("[[npc]]\nid = \"not-a-uuid\"\nfactions = []\n").is_err());
    }
}
