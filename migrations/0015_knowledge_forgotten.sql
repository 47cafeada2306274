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
    -- The cap's DELETE runs on every learned batch and usually removes nothing: only a
    -- deletion wakes the leader.
    IF EXISTS (SELECT 1 FROM gone) THEN
        INSERT INTO knowledge_forgotten (npc_id, fact_id, origin_fact_id)
            SELECT npc_id, id, origin_fact_id FROM gone;
        PERFORM pg_notify('npcmem_gossip_world', '');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER knowledge_facts_deleted
    AFTER DELETE ON knowledge_facts REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_facts_forgotten();

-- Facts learned from anything but gossip, by holder and time: the gossip tick asks whether
-- a listener learned such a fact after the leader's last load (partial, so gossip's own
-- inserts do not maintain it).
CREATE INDEX knowledge_facts_learned_idx ON knowledge_facts (npc_id, created_at) WHERE source <> 'gossip';

-- Whether a tick's gossip copies in `facts`, planned from the leader's memory as loaded at
-- `loaded_since` (its watermark), may be stored as they are. Raises otherwise, so the
-- all-or-nothing insert fails as a whole:
-- * NPG02 if a listener learned, at or after `loaded_since`, a fact of the same category
--   and subject from anything but gossip: the leader did not know it, so did not check
--   the copy against it for a contradiction (the tick checks the batch in Postgres and
--   writes it again);
-- * NPG01 if a speaker no longer holds the fact it tells: memory learns of a deletion a
--   tick or so late, and a deleted fact (a forgotten player's above all) must not come
--   back as a copy (the tick inserts again, skipping those copies).
-- STABLE and without row references, so an insert's WHERE evaluates it once per
-- statement, not per row.
CREATE FUNCTION gossip_copies_may_go(facts knowledge_fact_row[], loaded_since timestamptz)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    unseen boolean;
    forgotten boolean;
BEGIN
    SELECT coalesce(bool_or(c.unseen), false), coalesce(bool_or(NOT c.held), false) INTO unseen, forgotten
    FROM (SELECT EXISTS (SELECT 1 FROM knowledge_facts k
                         WHERE k.npc_id = f.npc_id AND k.source <> 'gossip' AND k.created_at >= loaded_since
                           AND k.category = f.category AND k.subject_id IS NOT DISTINCT FROM f.subject_id) AS unseen,
                 EXISTS (SELECT 1 FROM knowledge_facts k
                         WHERE k.npc_id = f.speaker_id AND k.origin_fact_id = f.origin_fact_id) AS held
          FROM unnest(facts) AS f WHERE f.speaker_id IS NOT NULL) AS c;
    IF unseen THEN
        RAISE EXCEPTION 'a listener learned a fact the leader has not loaded' USING ERRCODE = 'NPG02';
    END IF;
    IF forgotten THEN
        RAISE EXCEPTION 'a speaker no longer holds the fact it tells' USING ERRCODE = 'NPG01';
    END IF;
    RETURN true;
END;
$$;
