-- Gossip writes knowledge facts by the thousand per second, and each index costs a random
-- page write per row (with a full-page image in the WAL after every checkpoint). Reads by
-- NPC are served by the unique (npc_id, origin_fact_id) index; ordering an NPC's few
-- hundred facts by importance is a small sort.
DROP INDEX knowledge_facts_npc_idx;
