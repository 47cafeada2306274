-- Contradicting knowledge (issue 6): a newer fact that contradicts one an NPC holds
-- supersedes it (superseded_by, from 0007) or lowers its confidence; either way the row
-- is kept and stamped here, so the gossip leader reloads just the facts that changed.
ALTER TABLE knowledge_facts ADD COLUMN revised_at timestamptz;
CREATE INDEX knowledge_facts_revised_idx ON knowledge_facts (revised_at) WHERE revised_at IS NOT NULL;
