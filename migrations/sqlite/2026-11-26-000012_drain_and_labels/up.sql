-- Drain (issue 18): when an admin took the agent out of service (no new runs; runs it holds
-- finish), NULL while it is in service. Kept across heartbeats and re-registrations.
ALTER TABLE agent ADD COLUMN drained_ms BIGINT;
-- Labels (issue 18): what the agent said about its host at its last heartbeat, and what a job
-- requires of the agent that runs it; `key=value,key=value` in key order, '' for none.
ALTER TABLE agent ADD COLUMN labels TEXT NOT NULL DEFAULT '';
ALTER TABLE job ADD COLUMN agent_labels TEXT NOT NULL DEFAULT '';
