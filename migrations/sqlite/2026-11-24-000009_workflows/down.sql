DROP INDEX uk_job_run_node;
ALTER TABLE job_run DROP COLUMN outputs;
ALTER TABLE job_run DROP COLUMN env;
ALTER TABLE job_run DROP COLUMN timeout_s;
ALTER TABLE job_run DROP COLUMN node_attempt;
ALTER TABLE job_run DROP COLUMN workflow_node_id;
DROP TABLE workflow_node;
DROP TABLE workflow_run;
DROP TABLE workflow;
