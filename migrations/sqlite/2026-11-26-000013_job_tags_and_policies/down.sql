ALTER TABLE job DROP COLUMN keep_failed;
ALTER TABLE job DROP COLUMN keep_succeeded;
ALTER TABLE job DROP COLUMN start_deadline_s;
ALTER TABLE job DROP COLUMN tags;
