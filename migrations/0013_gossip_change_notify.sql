-- The gossip leader reloads what changed since its last refresh beside every tick's
-- commit; in a world where nothing changed those reads only compete with the commit. A
-- notification tells it something did: a location or profile written, a fact learned
-- from anything but gossip (the leader's own copies are in its memory), or a fact revised.
-- Postgres folds identical notifications of one transaction into one.
CREATE FUNCTION gossip_world_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('npcmem_gossip_world', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER npc_locations_changed
    AFTER INSERT OR UPDATE ON npc_locations FOR EACH STATEMENT EXECUTE FUNCTION gossip_world_changed();
CREATE TRIGGER npc_profiles_changed
    AFTER INSERT OR UPDATE ON npc_profiles FOR EACH STATEMENT EXECUTE FUNCTION gossip_world_changed();
-- Per row, so the condition can skip gossip's own inserts (the function runs only for rows
-- that match; the condition costs the tick's insert next to nothing).
CREATE TRIGGER knowledge_facts_learned
    AFTER INSERT ON knowledge_facts FOR EACH ROW WHEN (NEW.source <> 'gossip')
    EXECUTE FUNCTION gossip_world_changed();
CREATE TRIGGER knowledge_facts_revised
    AFTER UPDATE OF revised_at ON knowledge_facts FOR EACH ROW
    WHEN (NEW.revised_at IS DISTINCT FROM OLD.revised_at) EXECUTE FUNCTION gossip_world_changed();
