-- Recall's sentence vectors (DESIGN §10): one row per conversation and embedding model;
-- `vectors` holds `turns` × `dims` little-endian f32, turn by turn in transcript order,
-- so a pair's vectors load as a few rows rather than one row per turn. Rows of two models
-- never mix: readers ask for the configured model. Blanking a transcript (forget-player,
-- the per-pair cap) deletes its rows in the same statement's transaction.
CREATE TABLE conversation_embeddings (
    conversation_id  uuid        NOT NULL,
    model            text        NOT NULL,
    npc_id           uuid        NOT NULL,
    player_id        uuid        NOT NULL,
    dims             integer     NOT NULL CHECK (dims > 0),
    turns            integer     NOT NULL CHECK (turns > 0),
    vectors          bytea       NOT NULL CHECK (length(vectors) = turns * dims * 4),
    embedded_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, model)
);
CREATE INDEX conversation_embeddings_player_idx ON conversation_embeddings (player_id);
