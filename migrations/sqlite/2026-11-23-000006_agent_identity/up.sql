-- Agent identity (issue 12): each jobfleet agent presents its own key; the admin stores its
-- SHA-256 at the first registration (made with the shared enrollment token) and from then on
-- accepts heartbeats and results for that agent only with that key. Rows that existed before
-- keep working as they did (approved, no key) until their agent registers with a key.
ALTER TABLE agent ADD COLUMN key_hash TEXT NOT NULL DEFAULT '';
-- 'approved', 'pending' (waits for an admin; gets no runs) or 'revoked' (refused).
ALTER TABLE agent ADD COLUMN approval TEXT NOT NULL DEFAULT 'approved';
-- The agent process that sent the last heartbeat; a new one means the old one's runs are gone.
ALTER TABLE agent ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
-- The user jobs run as when a trigger names none ('root' is shown as a warning).
ALTER TABLE agent ADD COLUMN run_as TEXT NOT NULL DEFAULT '';
CREATE INDEX ix_agent_key_hash ON agent (key_hash);
-- XXL-Job executors cannot present a key: a group lets them register with the shared token only
-- when an admin says so.
ALTER TABLE executor_group ADD COLUMN allow_executors BOOLEAN NOT NULL DEFAULT 0;
-- Which agent process accepted a run, and its accept sequence number there: a heartbeat that
-- has handed out that number and no longer lists the run proves the run is gone.
ALTER TABLE job_run ADD COLUMN agent_instance TEXT;
ALTER TABLE job_run ADD COLUMN agent_seq BIGINT;
CREATE INDEX ix_job_run_agent ON job_run (agent_address, status);
