-- Agent identity (issue 12): see the SQLite migration of the same name for why.
ALTER TABLE agent ADD COLUMN key_hash VARCHAR(64) NOT NULL DEFAULT '';
ALTER TABLE agent ADD COLUMN approval VARCHAR(16) NOT NULL DEFAULT 'approved';
ALTER TABLE agent ADD COLUMN instance_id VARCHAR(64) NOT NULL DEFAULT '';
ALTER TABLE agent ADD COLUMN run_as VARCHAR(64) NOT NULL DEFAULT '';
CREATE INDEX ix_agent_key_hash ON agent (key_hash);
ALTER TABLE executor_group ADD COLUMN allow_executors BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE job_run ADD COLUMN agent_instance VARCHAR(64);
ALTER TABLE job_run ADD COLUMN agent_seq BIGINT;
CREATE INDEX ix_job_run_agent ON job_run (agent_address, status);
