DROP INDEX ix_agent_app_seen;
DROP INDEX ix_agent_seen;
