-- The cluster relay (issue 14): the base URL of the admin holding the agent's connection, which
-- the other admins send that agent's calls through ('' when no admin holds one).
ALTER TABLE agent ADD COLUMN link_url TEXT NOT NULL DEFAULT '';
-- Relays look the holder up by address alone.
CREATE INDEX ix_agent_address ON agent (address);
