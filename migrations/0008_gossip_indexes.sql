-- The gossip leader reloads what changed since its last tick.
CREATE INDEX knowledge_facts_created_idx ON knowledge_facts (created_at);
CREATE INDEX npc_locations_as_of_idx ON npc_locations (as_of);
CREATE INDEX npc_profiles_as_of_idx ON npc_profiles (as_of);
