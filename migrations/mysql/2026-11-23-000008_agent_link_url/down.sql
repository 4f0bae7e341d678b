DROP INDEX ix_agent_address ON agent;
ALTER TABLE agent DROP COLUMN link_url;
