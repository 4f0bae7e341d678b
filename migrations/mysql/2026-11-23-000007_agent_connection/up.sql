-- Agents that dial out (issue 14): see the SQLite migration of the same name for why.
ALTER TABLE agent ADD COLUMN mode VARCHAR(16) NOT NULL DEFAULT '';
ALTER TABLE agent ADD COLUMN link_admin VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE agent ADD COLUMN link_since_ms BIGINT;
ALTER TABLE agent ADD COLUMN link_rtt_us BIGINT;
