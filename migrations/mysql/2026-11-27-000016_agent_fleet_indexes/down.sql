DROP INDEX ix_agent_app_seen ON agent;
DROP INDEX ix_agent_seen ON agent;
