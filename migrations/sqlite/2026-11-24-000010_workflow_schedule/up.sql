-- Workflow schedules (issue 16): a workflow is scheduled like a job (same columns, same
-- meaning), planned by the same scheduler pass under the same lock.
ALTER TABLE workflow ADD COLUMN schedule_type TEXT NOT NULL DEFAULT 'none';
ALTER TABLE workflow ADD COLUMN schedule_expr TEXT;
ALTER TABLE workflow ADD COLUMN interval_s BIGINT;
ALTER TABLE workflow ADD COLUMN once_at_ms BIGINT;
ALTER TABLE workflow ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE workflow ADD COLUMN misfire TEXT NOT NULL DEFAULT 'do_nothing';
-- The next slot not planned yet; NULL when the workflow never fires again (or is disabled).
ALTER TABLE workflow ADD COLUMN next_fire_ms BIGINT;
-- A slot planned by a pass and not started yet: the slot, and when to start it (later than
-- the slot for a misfire catch-up). A workflow run starts only by clearing these with a
-- conditional update, so one admin starts it; an admin that stopped before starting it
-- leaves them set and another admin's monitor starts it.
ALTER TABLE workflow ADD COLUMN pending_slot_ms BIGINT;
ALTER TABLE workflow ADD COLUMN pending_at_ms BIGINT;
CREATE INDEX ix_workflow_due ON workflow (enabled, next_fire_ms);

-- The slot a scheduled workflow run stands for (NULL for a manual or API trigger): one run
-- per slot, whichever admin starts it.
ALTER TABLE workflow_run ADD COLUMN fire_slot_ms BIGINT;
CREATE UNIQUE INDEX uk_workflow_run_slot ON workflow_run (workflow_id, fire_slot_ms);
