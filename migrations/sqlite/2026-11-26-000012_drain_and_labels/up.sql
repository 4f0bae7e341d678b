-- Drain (issue 18): when an admin took the agent out of service (no new runs; runs it holds
-- finish), NULL while it is in service. Kept across heartbeats and re-registrations.
ALTER TABLE agent ADD COLUMN drained_ms BIGINT;
-- Labels (issue 18): what the agent said about its host at its last heartbeat, and what a job
-- requires of the agent that runs it; `key=value,key=value` in key order, '' for none (at most
-- 32 labels of 63 + 1 + 63 bytes and 31 commas: 4,095 bytes).
ALTER TABLE agent ADD COLUMN labels TEXT NOT NULL DEFAULT '';
ALTER TABLE job ADD COLUMN agent_labels TEXT NOT NULL DEFAULT '';
-- A run's retry (issue 18) reads its attempt chain under the write lock: by index, not by a
-- scan of the job's runs.
CREATE INDEX ix_job_run_first ON job_run (first_run_id);
