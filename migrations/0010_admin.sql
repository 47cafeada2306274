-- Admin actions (issue 8, DESIGN §4): every change an operator makes through the
-- `npcmem` CLI — who (the --actor flag, NPCMEM_ADMIN_ACTOR, or the OS user), what (an
-- action name and its details), when. Rows are only ever inserted.
CREATE TABLE admin_actions (
    id          bigserial   PRIMARY KEY,
    actor       text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action      text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX admin_actions_at_idx ON admin_actions (at DESC);
CREATE INDEX admin_actions_action_idx ON admin_actions (action, at DESC);
