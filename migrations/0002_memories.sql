-- Memories (issue 3): one table for all three types with a discriminator (seed §Memory
-- Storage, DESIGN §4), and the audit trail of flagged memories (seed §Flagged Memory Audit).

CREATE TABLE memories (
    id                     uuid PRIMARY KEY,
    npc_id                 uuid        NOT NULL,
    player_id              uuid,                      -- NULL: world-scoped
    memory_type            text        NOT NULL CHECK (memory_type IN ('episodic','semantic','procedural')),
    content                text        NOT NULL CHECK (length(content) BETWEEN 1 AND 2000),
    tags                   text[]      NOT NULL DEFAULT '{}',
    importance             double precision NOT NULL CHECK (importance BETWEEN 0 AND 1),
    confidence             double precision NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    salience               double precision NOT NULL DEFAULT 0 CHECK (salience BETWEEN 0 AND 1),
    -- episodic
    location               text,
    emotional_valence      text        NOT NULL DEFAULT 'neutral' CHECK (emotional_valence IN ('positive','negative','neutral')),
    emotional_intensity    double precision NOT NULL DEFAULT 0 CHECK (emotional_intensity BETWEEN 0 AND 1),
    -- semantic
    source_episodes        uuid[]      NOT NULL DEFAULT '{}',
    -- procedural
    pattern                text,
    trigger_context        jsonb       NOT NULL DEFAULT '{}',
    reinforcement_count    integer     NOT NULL DEFAULT 0,
    locked                 boolean     NOT NULL DEFAULT false,
    safety_flag            text        NOT NULL DEFAULT 'clean' CHECK (safety_flag IN ('clean','suspect','redacted')),
    source_conversation_id uuid,
    extractor              text,                      -- llm | rules | consolidation | admin
    created_at             timestamptz NOT NULL DEFAULT now(),
    last_accessed          timestamptz NOT NULL DEFAULT now(),
    access_count           integer     NOT NULL DEFAULT 0
);
CREATE INDEX memories_pair_type_idx ON memories (npc_id, player_id, memory_type, created_at DESC);
CREATE INDEX memories_tags_idx ON memories USING gin (tags);
CREATE INDEX memories_source_conversation_idx ON memories (source_conversation_id);
CREATE INDEX memories_player_idx ON memories (player_id);

CREATE TABLE memory_audit (
    id                   bigserial PRIMARY KEY,
    memory_id            uuid        NOT NULL,
    npc_id               uuid        NOT NULL,
    player_id            uuid,
    conversation_id      uuid,
    content              text        NOT NULL,
    reasons              text[]      NOT NULL,
    safety_flag          text        NOT NULL,
    original_importance  double precision NOT NULL,
    flagged_at           timestamptz NOT NULL DEFAULT now(),
    reviewed_at          timestamptz,
    reviewed_by          text
);
CREATE INDEX memory_audit_unreviewed_idx ON memory_audit (flagged_at) WHERE reviewed_at IS NULL;
CREATE INDEX memory_audit_player_idx ON memory_audit (player_id);
