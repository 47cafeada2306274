-- Who did what to whom (issue 19, perspective). A memory keeps its parties; a knowledge
-- fact also keeps the statement with {player} and {npc} for them and the names to fill
-- in, so every holder along a gossip chain reads it from its own side.
ALTER TABLE memories ADD COLUMN actor_id uuid, ADD COLUMN target_id uuid;
ALTER TABLE knowledge_facts
    ADD COLUMN actor_id uuid,
    ADD COLUMN target_id uuid,
    ADD COLUMN statement text CHECK (statement IS NULL OR length(statement) BETWEEN 1 AND 2000),
    ADD COLUMN about_npc_id uuid,
    ADD COLUMN about_npc_name text,
    ADD COLUMN about_player_name text;

-- Rows written before: an event memory (the original design's tags, and the kinds the
-- rules extractor names) was the player's deed towards the NPC.
UPDATE memories SET actor_id = player_id, target_id = npc_id
 WHERE memory_type = 'episodic'
   AND tags && ARRAY['trade','gift','helpful','help','combat','heroic','rescue','threat','insult',
                     'betrayal','theft','promise','secret'];
-- A fact learned from a memory (and every copy gossip made of it) takes the memory's parties.
UPDATE knowledge_facts k SET actor_id = m.actor_id, target_id = m.target_id, about_npc_id = m.npc_id
  FROM memories m
 WHERE m.id = k.origin_fact_id AND m.actor_id IS NOT NULL;

-- The row gossip inserts facts as (migration 0014) carries the same columns, last.
ALTER TYPE knowledge_fact_row
    ADD ATTRIBUTE actor_id uuid,
    ADD ATTRIBUTE target_id uuid,
    ADD ATTRIBUTE statement text,
    ADD ATTRIBUTE about_npc_id uuid,
    ADD ATTRIBUTE about_npc_name text,
    ADD ATTRIBUTE about_player_name text;
