-- Fleet scale (issue 19): with thousands of agents, nothing that runs per trigger or per
-- monitor pass may read the whole registry. A group's live agents (routing, group liveness)
-- are a range of (app_name, last_seen_ms); the fleet's live count, the agents that died in a
-- window and the list sorted by last heartbeat are a range of last_seen_ms.
CREATE INDEX ix_agent_app_seen ON agent (app_name, last_seen_ms);
CREATE INDEX ix_agent_seen ON agent (last_seen_ms);
