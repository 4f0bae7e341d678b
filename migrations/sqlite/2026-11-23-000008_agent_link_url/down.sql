DROP INDEX ix_agent_address;
ALTER TABLE agent DROP COLUMN link_url;
