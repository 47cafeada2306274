-- The row type of a fact as the gossip service inserts it (knowledge::insert_facts). A
-- batch travels as one binary array of these instead of fifteen column arrays: Postgres
-- unnests one array instead of fifteen, and tags and provenance arrive as binary arrays
-- instead of text literals to parse (about 0.3 ms less per 100 facts, measured).
CREATE TYPE knowledge_fact_row AS (
    id                uuid,
    npc_id            uuid,
    category          text,
    subject_id        uuid,
    content           text,
    tags              text[],
    confidence        double precision,
    importance        double precision,
    source            text,
    source_memory_id  uuid,
    origin_fact_id    uuid,
    hop_count         integer,
    provenance        uuid[],
    speaker_id        uuid,
    expires_at        timestamptz
);
