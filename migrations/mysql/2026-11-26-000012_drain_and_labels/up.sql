-- Drain, labels and the attempt-chain index (issue 18): see the SQLite migration of the same
-- name. Labels are ASCII by their rules; VARCHAR rather than TEXT, whose literal default
-- MySQL (unlike MariaDB) refuses.
ALTER TABLE agent ADD COLUMN drained_ms BIGINT NULL;
ALTER TABLE agent ADD COLUMN labels VARCHAR(4096) CHARACTER SET ascii NOT NULL DEFAULT '';
ALTER TABLE job ADD COLUMN agent_labels VARCHAR(4096) CHARACTER SET ascii NOT NULL DEFAULT '';
CREATE INDEX ix_job_run_first ON job_run (first_run_id);
