DROP INDEX ix_job_run_agent ON job_run;
ALTER TABLE job_run DROP COLUMN agent_seq;
ALTER TABLE job_run DROP COLUMN agent_instance;
ALTER TABLE executor_group DROP COLUMN allow_executors;
DROP INDEX ix_agent_key_hash ON agent;
ALTER TABLE agent DROP COLUMN run_as;
ALTER TABLE agent DROP COLUMN instance_id;
ALTER TABLE agent DROP COLUMN approval;
ALTER TABLE agent DROP COLUMN key_hash;
