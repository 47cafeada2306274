-- The gossip leader reloads locations and profiles changed since its last refresh. `as_of`
-- is the game's own timestamp of a move or profile, which can be far older than the
-- moment the row was written (a consumer catching up): the reload follows the database's
-- own write time instead, compared with the start of the oldest open transaction.
ALTER TABLE npc_locations ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE npc_profiles ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now();
DROP INDEX npc_locations_as_of_idx;
DROP INDEX npc_profiles_as_of_idx;
CREATE INDEX npc_locations_recorded_idx ON npc_locations (recorded_at);
CREATE INDEX npc_profiles_recorded_idx ON npc_profiles (recorded_at);
