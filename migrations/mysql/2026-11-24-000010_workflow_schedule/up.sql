-- Workflow schedules (issue 16): see the SQLite migration of the same name for the why.
ALTER TABLE workflow ADD COLUMN schedule_type VARCHAR(16) NOT NULL DEFAULT 'none';
ALTER TABLE workflow ADD COLUMN schedule_expr VARCHAR(255);
ALTER TABLE workflow ADD COLUMN interval_s BIGINT;
ALTER TABLE workflow ADD COLUMN once_at_ms BIGINT;
ALTER TABLE workflow ADD COLUMN timezone VARCHAR(64) NOT NULL DEFAULT 'UTC';
ALTER TABLE workflow ADD COLUMN misfire VARCHAR(32) NOT NULL DEFAULT 'do_nothing';
ALTER TABLE workflow ADD COLUMN next_fire_ms BIGINT;
ALTER TABLE workflow ADD COLUMN pending_slot_ms BIGINT;
ALTER TABLE workflow ADD COLUMN pending_at_ms BIGINT;
CREATE INDEX ix_workflow_due ON workflow (enabled, next_fire_ms);

ALTER TABLE workflow_run ADD COLUMN fire_slot_ms BIGINT;
CREATE UNIQUE INDEX uk_workflow_run_slot ON workflow_run (workflow_id, fire_slot_ms);
