-- Knowledge facts and NPC profiles (DESIGN §4; seed §Knowledge Graph & Gossip). The
-- gossip service owns and writes them; enrich reads them now (knowledge and mood
-- providers, the stranger fallback of {reputation}).
CREATE TABLE knowledge_facts (
    id                uuid             PRIMARY KEY,
    npc_id            uuid             NOT NULL,
    category          text             NOT NULL CHECK (category IN
                          ('player_trait','world_event','location_info','npc_gossip','faction_intel')),
    subject_id        uuid,
    content           text             NOT NULL CHECK (length(content) BETWEEN 1 AND 2000),
    tags              text[]           NOT NULL DEFAULT '{}',
    confidence        double precision NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    importance        double precision NOT NULL CHECK (importance BETWEEN 0 AND 1),
    source            text             NOT NULL CHECK (source IN ('direct_observation','conversation','gossip','authored')),
    source_memory_id  uuid,
    -- gossip: the fact this copy descends from (its own id for an original), hops from
    -- it, the NPCs it passed through, and who told this NPC
    origin_fact_id    uuid             NOT NULL,
    hop_count         integer          NOT NULL DEFAULT 0,
    provenance        uuid[]           NOT NULL DEFAULT '{}',
    speaker_id        uuid,
    -- a newer contradicting fact lowers or supersedes this one (kept with provenance)
    superseded_by     uuid,
    created_at        timestamptz      NOT NULL DEFAULT now(),
    expires_at        timestamptz,
    UNIQUE (npc_id, origin_fact_id)
);
CREATE INDEX knowledge_facts_npc_idx ON knowledge_facts (npc_id, importance DESC);
CREATE INDEX knowledge_facts_subject_idx ON knowledge_facts (subject_id);

CREATE TABLE npc_profiles (
    npc_id           uuid             PRIMARY KEY,
    name             text             NOT NULL,
    role             text,
    drives           jsonb            NOT NULL DEFAULT '{"social":0.5,"safety":0.5,"loyalty":0.5,"curiosity":0.5}',
    mood             text,
    mood_intensity   double precision NOT NULL DEFAULT 0 CHECK (mood_intensity BETWEEN 0 AND 1),
    mood_expires_at  timestamptz,
    as_of            timestamptz      NOT NULL DEFAULT now()
);

CREATE TABLE npc_locations (
    npc_id    uuid        PRIMARY KEY,
    room_id   text        NOT NULL,
    as_of     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX npc_locations_room_idx ON npc_locations (room_id);
