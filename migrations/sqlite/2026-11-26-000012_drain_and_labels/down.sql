DROP INDEX ix_job_run_first;
ALTER TABLE job DROP COLUMN agent_labels;
ALTER TABLE agent DROP COLUMN labels;
ALTER TABLE agent DROP COLUMN drained_ms;
