-- Drain and labels (issue 18): see the SQLite migration of the same name.
ALTER TABLE agent ADD COLUMN drained_ms BIGINT NULL;
ALTER TABLE agent ADD COLUMN labels TEXT NOT NULL DEFAULT '';
ALTER TABLE job ADD COLUMN agent_labels TEXT NOT NULL DEFAULT '';
