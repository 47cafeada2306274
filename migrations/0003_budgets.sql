-- Shared LLM budgets (DESIGN §4): token spend per UTC day, globally and per NPC, and
-- request counts per minute window. Every extract (and later consolidate) replica
-- reserves here before it calls a model, so the limits hold across replicas.
--
-- `reserved` only grows by reservations that fit under the limit in one atomic statement
-- and shrinks when a reservation is settled below it, so reserved <= limit always holds
-- for the limit the statement was given. `spent` is what providers reported.
-- The global row is leased in blocks (a replica spends its lease locally and returns
-- the rest), so it is written a few times a second at most, not once per call.
CREATE TABLE token_budget_usage (
    day         date        NOT NULL,
    scope       text        NOT NULL CHECK (scope IN ('global', 'npc')),
    -- the nil UUID for the global row
    npc_id      uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    reserved    bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    spent       bigint      NOT NULL DEFAULT 0 CHECK (spent >= 0),
    calls       bigint      NOT NULL DEFAULT 0 CHECK (calls >= 0),
    -- what the last lease statement granted: PostgreSQL 15 cannot RETURN old values, so
    -- the grant is computed once from the locked row and written here to be returned
    last_grant  bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (day, scope, npc_id)
);

-- Requests per minute: `kind` is 'extraction' or 'consolidation'; one row per minute
-- window, old rows deleted by whoever opens a new window.
CREATE TABLE request_rate (
    kind    text        NOT NULL,
    window_start timestamptz NOT NULL,
    used    integer     NOT NULL DEFAULT 0 CHECK (used >= 0),
    last_grant integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, window_start)
);
