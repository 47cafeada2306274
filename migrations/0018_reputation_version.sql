-- Each write of a (faction, player) reputation takes it to the next version; a
-- reputation-shift signal's id is derived from the version its crossing wrote (issue 20),
-- so every transaction that read the same row derives the same id. NULL (rows written
-- before, or imported from an older export) counts as 0.
ALTER TABLE faction_reputation ADD COLUMN version bigint;
