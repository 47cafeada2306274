-- Foundation schema (issue 2): the conversation ledger, working memory, the outbox,
-- player privacy, runtime switches, and the factions ingest records.

-- Ledger and extraction job state machine (DESIGN §4). The primary key is the dedup:
-- ingest inserts with ON CONFLICT DO NOTHING, so a redelivered conversation is a no-op.
CREATE TABLE conversations (
    conversation_id  uuid PRIMARY KEY,
    npc_id           uuid        NOT NULL,
    player_id        uuid        NOT NULL,
    npc_name         text        NOT NULL,
    npc_role         text,
    player_name      text        NOT NULL,
    npc_factions     text[]      NOT NULL DEFAULT '{}',
    player_factions  text[]      NOT NULL DEFAULT '{}',
    location         text,
    -- redacted transcript: [{"speaker":"player","text":"..."}]; '[]' for skipped rows
    transcript       jsonb       NOT NULL,
    message_count    integer     NOT NULL,
    redactions       integer     NOT NULL DEFAULT 0,
    state            text        NOT NULL CHECK (state IN
                       ('pending','extracting','storing','complete','failed','skipped','forgotten')),
    skip_reason      text,
    attempts         integer     NOT NULL DEFAULT 0,
    error            text,
    extractor        text,
    started_at       timestamptz NOT NULL,
    ended_at         timestamptz NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);
-- fillfactor leaves room on each page so that extract's state changes (pending →
-- extracting → complete) are HOT updates: no indexed column changes, so no index writes.
CREATE INDEX conversations_pair_idx ON conversations (npc_id, player_id, ended_at DESC);
CREATE INDEX conversations_player_idx ON conversations (player_id);

-- Seed §Working Memory Buffer: the last 3 conversation summaries per pair, so an NPC
-- remembers a conversation before extraction has finished.
CREATE TABLE working_memory (
    conversation_id  uuid PRIMARY KEY REFERENCES conversations (conversation_id) ON DELETE CASCADE,
    npc_id           uuid        NOT NULL,
    player_id        uuid        NOT NULL,
    summary          text        NOT NULL,
    ended_at         timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
-- Matches the trim's ORDER BY exactly, so keeping the newest three is an index walk.
CREATE INDEX working_memory_pair_idx ON working_memory (npc_id, player_id, ended_at DESC, conversation_id DESC);

-- Transactional outbox (DESIGN §3). msg_id is the natural key used as Nats-Msg-Id when
-- the message has one; NULL means "use the row id".
CREATE TABLE outbox (
    id          bigserial   PRIMARY KEY,
    subject     text        NOT NULL,
    msg_id      text,
    payload     bytea       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One NOTIFY per statement, not per row: a batch insert wakes the relay once.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('npcmem_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify_after_insert
    AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- Seed open question 2 (privacy). updated_at is the `at` of the newest applied
-- world.player_privacy message: an older message never overrides a newer one.
CREATE TABLE player_privacy (
    player_id     uuid PRIMARY KEY,
    allow_memory  boolean     NOT NULL DEFAULT true,
    forgotten_at  timestamptz,
    updated_at    timestamptz NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now()
);

-- Runtime switches (degraded mode, gossip on/off), reloaded on control.changed.
CREATE TABLE runtime_switches (
    switch      text PRIMARY KEY,
    value       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL DEFAULT 'system'
);
INSERT INTO runtime_switches (switch, value) VALUES
    ('degraded', 'false'),
    ('gossip_enabled', 'true'),
    ('consolidation_enabled', 'true');

-- Factions as the game reports them (DESIGN §9: latest timestamp wins).
CREATE TABLE player_factions (
    player_id   uuid PRIMARY KEY,
    factions    text[]      NOT NULL,
    as_of       timestamptz NOT NULL
);
CREATE TABLE npc_factions (
    npc_id      uuid PRIMARY KEY,
    factions    text[]      NOT NULL,
    as_of       timestamptz NOT NULL
);
