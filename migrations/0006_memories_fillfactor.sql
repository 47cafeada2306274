-- Decay rewrites the salience of nearly every memory each day. With room left on each
-- page the new row versions stay on their page (HOT updates), so no index is touched;
-- a full page would send each update to another page and through all four indexes.
-- Applies to pages written from now on; `VACUUM FULL memories` (or pg_repack) rewrites
-- the existing ones.
ALTER TABLE memories SET (fillfactor = 50);
