ALTER TABLE agent DROP COLUMN link_rtt_us;
ALTER TABLE agent DROP COLUMN link_since_ms;
ALTER TABLE agent DROP COLUMN link_admin;
ALTER TABLE agent DROP COLUMN mode;
