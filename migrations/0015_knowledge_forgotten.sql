-- Facts deleted from knowledge_facts (the per-NPC cap evicted them, `npcmem forget-player`
-- removed a player's): the gossip leader holds spreadable facts in memory and reloads
-- only what changed, so deletions are logged here for it, stamped like every other change
-- with their transaction's start. The rows name NPCs and facts, never a player. The leader
-- prunes rows older than an hour before its last refresh (a new leader loads everything).
CREATE TABLE knowledge_forgotten (
    npc_id          uuid        NOT NULL,
    fact_id         uuid        NOT NULL,
    origin_fact_id  uuid        NOT NULL,
    forgotten_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX knowledge_forgotten_at_idx ON knowledge_forgotten (forgotten_at);

-- Per statement, with the deleted rows as a transition table: a bulk delete logs its rows
-- in one insert and notifies the leader once.
CREATE FUNCTION knowledge_facts_forgotten() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO knowledge_forgotten (npc_id, fact_id, origin_fact_id)
        SELECT npc_id, id, origin_fact_id FROM gone;
    PERFORM pg_notify('npcmem_gossip_world', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER knowledge_facts_deleted
    AFTER DELETE ON knowledge_facts REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_facts_forgotten();

-- Whether every gossip copy in `facts` is told by a speaker who still holds its origin
-- fact: the leader plans from memory, which learns of a deletion a tick or so late, and
-- a fact deleted meanwhile (a forgotten player's above all) must not come back as a copy.
-- Raises (SQLSTATE NPG01) otherwise, so the all-or-nothing insert fails as a whole and the
-- tick inserts again, skipping those copies. STABLE and without row references, so an
-- insert's WHERE evaluates it once per statement, not per row.
CREATE FUNCTION gossip_speakers_hold(facts knowledge_fact_row[]) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(facts) AS f
               WHERE f.speaker_id IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM knowledge_facts k
                                 WHERE k.npc_id = f.speaker_id AND k.origin_fact_id = f.origin_fact_id)) THEN
        RAISE EXCEPTION 'a speaker no longer holds the fact it tells' USING ERRCODE = 'NPG01';
    END IF;
    RETURN true;
END;
$$;
