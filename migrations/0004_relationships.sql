-- Relationships (DESIGN §4, §9; seed §Relationship Evaluation, §Concurrency Control,
-- §Faction-Based Initialization), written by relate.

CREATE TABLE relationships (
    npc_id             uuid             NOT NULL,
    player_id          uuid             NOT NULL,
    trust              double precision NOT NULL CHECK (trust BETWEEN 0 AND 1),
    fear               double precision NOT NULL CHECK (fear BETWEEN 0 AND 1),
    respect            double precision NOT NULL CHECK (respect BETWEEN 0 AND 1),
    loyalty            double precision NOT NULL CHECK (loyalty BETWEEN 0 AND 1),
    friendliness       double precision NOT NULL CHECK (friendliness BETWEEN 0 AND 1),
    romantic_interest  double precision NOT NULL CHECK (romantic_interest BETWEEN 0 AND 1),
    disposition        double precision NOT NULL CHECK (disposition BETWEEN -1 AND 1),
    stage              text             NOT NULL CHECK (stage IN
                           ('stranger','enemy','rival','trusted_ally','close_friend','friend','acquaintance')),
    interaction_count  integer          NOT NULL DEFAULT 0,
    memory_count       integer          NOT NULL DEFAULT 0,
    first_interaction  timestamptz,
    last_interaction   timestamptz,
    -- the farming cap's tally: positive change per dimension on gains_day, in the
    -- order trust, fear, respect, loyalty, friendliness, romantic_interest
    gains_day          date,
    gains              double precision[] NOT NULL DEFAULT '{0,0,0,0,0,0}',
    -- optimistic concurrency: every write is UPDATE … WHERE version = <read version>
    version            bigint           NOT NULL DEFAULT 0,
    created_at         timestamptz      NOT NULL DEFAULT now(),
    updated_at         timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (npc_id, player_id)
) WITH (fillfactor = 80);

-- faction reputation and the forget-player path read a player's relationships
CREATE INDEX relationships_player ON relationships (player_id);

-- Each conversation's deltas are applied once: this row is written in the transaction
-- that applies them. `version` is the relationship's version after applying it, so the
-- rows of one pair ordered by version are the order of application; `deltas` are the raw
-- per-dimension deltas before the farming cap, clamping and rounding.
CREATE TABLE applied_conversations (
    conversation_id  uuid        PRIMARY KEY,
    npc_id           uuid        NOT NULL,
    player_id        uuid        NOT NULL,
    version          bigint      NOT NULL,
    deltas           double precision[] NOT NULL,
    memory_count     integer     NOT NULL,
    ended_at         timestamptz NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX applied_conversations_pair ON applied_conversations (npc_id, player_id, version);

-- Factions and how each regards the others (seed FactionAttitude), filled from a
-- factions file (`npcmem factions load`, relate's NPCMEM_FACTIONS_FILE).
CREATE TABLE factions (
    faction      text        PRIMARY KEY,
    name         text        NOT NULL,
    description  text        NOT NULL DEFAULT '',
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE faction_attitudes (
    faction   text NOT NULL,
    toward    text NOT NULL,
    attitude  text NOT NULL CHECK (attitude IN ('allied','friendly','neutral','unfriendly','hostile')),
    PRIMARY KEY (faction, toward)
);

-- Per (faction, player): the mean disposition of the faction's NPCs who know the player.
CREATE TABLE faction_reputation (
    faction      text             NOT NULL,
    player_id    uuid             NOT NULL,
    reputation   double precision NOT NULL CHECK (reputation BETWEEN -1 AND 1),
    npcs_known   integer          NOT NULL,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (faction, player_id)
);
CREATE INDEX faction_reputation_player ON faction_reputation (player_id);

-- a faction's NPCs, for faction reputation
CREATE INDEX npc_factions_factions ON npc_factions USING gin (factions);
