-- The cluster relay (issue 14): see the SQLite migration of the same name for why.
ALTER TABLE agent ADD COLUMN link_url VARCHAR(512) NOT NULL DEFAULT '';
-- Relays look the holder up by address alone.
CREATE INDEX ix_agent_address ON agent (address);
