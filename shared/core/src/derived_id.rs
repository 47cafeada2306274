//! Ids of the messages relate derives from what happened (story signals and
//! `event.relationship.changed`): name-based UUIDs (v5) over the facts that identify the
//! happening, never random ones. Two computations of the same happening — a batch retried
//! or redelivered, two replicas that read the same state — therefore carry the same
//! `signal_id` / `event_id`, which the outbox relay sends as `Nats-Msg-Id`: JetStream drops
//! the second inside its duplicate window, a game deduplicating by `signal_id` after it.

use uuid::Uuid;

/// The namespace of every id derived here, so they cannot meet v5 ids other software
/// derives from the same bytes.
const NAMESPACE: Uuid = Uuid::from_u128(0x1f70_9d72_0d73_4fff_9212_54f9_30af_ec31);

/// A happening, reduced to the facts that identify it. Relationship happenings name the
/// conversation besides the version it produced: one conversation makes one version, but
/// a forgotten player's versions start again at 1 while conversations never repeat.
/// A reputation crossing names the version of the (faction, player) reputation row that
/// the crossing wrote, so every transaction that read the same row derives the same id.
/// That version counts writes (one per relate transaction), and restarts after
/// `forget-player` deletes the row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Happening<'a> {
    /// A relationship dimension crossed a threshold (`upward`: from ≤ to >).
    ThresholdCrossed {
        npc_id: Uuid,
        player_id: Uuid,
        conversation_id: Uuid,
        version: i64,
        dimension: &'a str,
        threshold: f64,
        upward: bool,
    },
    StageChanged {
        npc_id: Uuid,
        player_id: Uuid,
        conversation_id: Uuid,
        version: i64,
        from: &'a str,
        to: &'a str,
    },
    MemoryMilestone {
        npc_id: Uuid,
        player_id: Uuid,
        conversation_id: Uuid,
        version: i64,
        memory_count: i32,
    },
    /// `event.relationship.changed`: the conversation took the pair to `version`.
    RelationshipChanged {
        npc_id: Uuid,
        player_id: Uuid,
        conversation_id: Uuid,
        version: i64,
    },
    /// The player's reputation with `faction` crossed `level` (`upward`: from below to at
    /// or above) in the write that took its row to `version`.
    ReputationCrossed {
        faction: &'a str,
        player_id: Uuid,
        level: f64,
        upward: bool,
        version: i64,
    },
}

impl Happening<'_> {
    pub fn id(&self) -> Uuid {
        Uuid::new_v5(&NAMESPACE, &self.name())
    }

    /// An unambiguous byte encoding: a tag, then fixed-width fields, strings length-prefixed.
    fn name(&self) -> Vec<u8> {
        let mut name = Name::default();
        match *self {
            Happening::ThresholdCrossed {
                npc_id,
                player_id,
                conversation_id,
                version,
                dimension,
                threshold,
                upward,
            } => {
                name.text("threshold_crossed").pair(npc_id, player_id, conversation_id, version);
                name.text(dimension).level(threshold).flag(upward);
            }
            Happening::StageChanged { npc_id, player_id, conversation_id, version, from, to } => {
                name.text("stage_changed").pair(npc_id, player_id, conversation_id, version);
                name.text(from).text(to);
            }
            Happening::MemoryMilestone { npc_id, player_id, conversation_id, version, memory_count } => {
                name.text("memory_milestone").pair(npc_id, player_id, conversation_id, version);
                name.integer(i64::from(memory_count));
            }
            Happening::RelationshipChanged { npc_id, player_id, conversation_id, version } => {
                name.text("relationship_changed").pair(npc_id, player_id, conversation_id, version);
            }
            Happening::ReputationCrossed { faction, player_id, level, upward, version } => {
                name.text("reputation_crossed").text(faction).uuid(player_id);
                name.level(level).flag(upward).integer(version);
            }
        }
        name.0
    }
}

#[derive(Default)]
struct Name(Vec<u8>);

impl Name {
    fn text(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(&(text.len() as u64).to_be_bytes());
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    fn uuid(&mut self, id: Uuid) -> &mut Self {
        self.0.extend_from_slice(id.as_bytes());
        self
    }

    fn integer(&mut self, value: i64) -> &mut Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    /// Levels in thousandths: values are compared rounded to 3 decimals, so
    /// `0.2` and `0.2000001` written in two rules files are the same level.
    fn level(&mut self, level: f64) -> &mut Self {
        self.integer((level * 1000.0).round() as i64)
    }

    fn flag(&mut self, flag: bool) -> &mut Self {
        self.0.push(u8::from(flag));
        self
    }

    fn pair(&mut self, npc_id: Uuid, player_id: Uuid, conversation_id: Uuid, version: i64) -> &mut Self {
        self.uuid(npc_id).uuid(player_id).uuid(conversation_id).integer(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NPC: Uuid = Uuid::from_u128(0x0b8e_9f57_8d0e_4d3c_a1b2_5c6d_7e8f_9a01);
    const PLAYER: Uuid = Uuid::from_u128(0x5f3a_2b1c_0d9e_4f8a_b7c6_d5e4_f3a2_b1c0);
    const CONVERSATION: Uuid = Uuid::from_u128(0x7d0c_7a4e_3c55_4d59_9a43_2b8f_6f1e_0a11);

    fn reputation(faction: &str, level: f64, upward: bool, version: i64) -> Happening<'_> {
        Happening::ReputationCrossed { faction, player_id: PLAYER, level, upward, version }
    }

    fn crossing(
        (npc_id, player_id, conversation_id): (Uuid, Uuid, Uuid),
        version: i64,
        dimension: &str,
        threshold: f64,
        upward: bool,
    ) -> Happening<'_> {
        Happening::ThresholdCrossed { npc_id, player_id, conversation_id, version, dimension, threshold, upward }
    }

    const PARTIES: (Uuid, Uuid, Uuid) = (NPC, PLAYER, CONVERSATION);

    #[test]
    fn the_same_happening_always_gets_the_same_id() {
        let smiths = reputation("smiths_guild", -0.25, false, 3);
        assert_eq!(smiths.id(), reputation("smiths_guild", -0.25, false, 3).id());
        assert_eq!(smiths.id().get_version_num(), 5, "name-based, not random");
        // Games keep these ids to deduplicate: the derivation must not drift between releases.
        assert_eq!(smiths.id(), Uuid::parse_str("74803921-1f09-5a99-adce-94cda71326ea").unwrap());
        let hostile = crossing(PARTIES, 7, "trust", 0.2, false);
        assert_eq!(hostile.id(), crossing(PARTIES, 7, "trust", 0.2, false).id());
        assert_eq!(reputation("guild", -0.25, false, 1).id(), reputation("guild", -0.2500001, false, 1).id());
    }

    #[test]
    fn every_identifying_fact_changes_the_id() {
        let smiths = reputation("smiths_guild", -0.25, false, 3);
        let other_player = Happening::ReputationCrossed {
            faction: "smiths_guild",
            player_id: NPC,
            level: -0.25,
            upward: false,
            version: 3,
        };
        for variant in [
            reputation("city_guard", -0.25, false, 3),
            reputation("smiths_guild", -0.5, false, 3),
            reputation("smiths_guild", -0.25, true, 3),
            reputation("smiths_guild", -0.25, false, 4),
            other_player,
        ] {
            assert_ne!(variant.id(), smiths.id(), "{variant:?}");
        }

        let hostile = crossing(PARTIES, 7, "trust", 0.2, false);
        for variant in [
            crossing((PLAYER, NPC, CONVERSATION), 7, "trust", 0.2, false),
            crossing((NPC, PLAYER, NPC), 7, "trust", 0.2, false),
            crossing(PARTIES, 8, "trust", 0.2, false),
            crossing(PARTIES, 7, "friendliness", 0.2, false),
            crossing(PARTIES, 7, "trust", 0.1, false),
            crossing(PARTIES, 7, "trust", 0.2, true),
            Happening::RelationshipChanged {
                npc_id: NPC,
                player_id: PLAYER,
                conversation_id: CONVERSATION,
                version: 7,
            },
            Happening::MemoryMilestone {
                npc_id: NPC,
                player_id: PLAYER,
                conversation_id: CONVERSATION,
                version: 7,
                memory_count: 10,
            },
        ] {
            assert_ne!(variant.id(), hostile.id(), "{variant:?}");
        }
    }

    #[test]
    fn strings_cannot_run_into_each_other() {
        let stage = |from, to| Happening::StageChanged {
            npc_id: NPC,
            player_id: PLAYER,
            conversation_id: CONVERSATION,
            version: 1,
            from,
            to,
        };
        assert_ne!(stage("friend", "enemy").id(), stage("friende", "nemy").id());
        assert_ne!(stage("friend", "enemy").id(), stage("enemy", "friend").id());
    }
}
