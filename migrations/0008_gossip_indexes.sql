-- The gossip leader reloads what changed since its last tick: facts learned from
-- conversations and the world (its own gossip copies it holds in memory already),
-- locations and profiles. Partial, so the copies gossip writes by the thousand per
-- second never enter the index these reloads scan.
CREATE INDEX knowledge_facts_learned_created_idx ON knowledge_facts (created_at) WHERE source <> 'gossip';
CREATE INDEX npc_locations_as_of_idx ON npc_locations (as_of);
CREATE INDEX npc_profiles_as_of_idx ON npc_profiles (as_of);

-- Gossip inserts thousands of facts a second at scale; every index costs on each insert.
-- Reads by subject always name the NPC too, which the (npc_id, importance) index serves.
DROP INDEX knowledge_facts_subject_idx;
