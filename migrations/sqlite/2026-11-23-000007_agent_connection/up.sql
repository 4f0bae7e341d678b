-- Agents that dial out (issue 14): how the admins reach each agent, and the connection it holds.
-- 'push' (admins dial its address), 'connect' (only over its connection; the address is a
-- conn://… name) or 'auto' (both); '' for an XXL-Job executor or an agent before this.
ALTER TABLE agent ADD COLUMN mode TEXT NOT NULL DEFAULT '';
-- The admin process holding the agent's connection ('' when none), since when, and the
-- round-trip time of its last ping in microseconds.
ALTER TABLE agent ADD COLUMN link_admin TEXT NOT NULL DEFAULT '';
ALTER TABLE agent ADD COLUMN link_since_ms BIGINT;
ALTER TABLE agent ADD COLUMN link_rtt_us BIGINT;
