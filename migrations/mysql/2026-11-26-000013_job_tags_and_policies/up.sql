-- Tags, the starting deadline and history limits (issue 18): see the SQLite migration of the
-- same name. Tags are ASCII by their rules; VARCHAR rather than TEXT, whose literal default
-- MySQL (unlike MariaDB) refuses.
ALTER TABLE job ADD COLUMN tags VARCHAR(1400) CHARACTER SET ascii NOT NULL DEFAULT '';
ALTER TABLE job ADD COLUMN start_deadline_s BIGINT NULL;
ALTER TABLE job ADD COLUMN keep_succeeded INTEGER NULL;
ALTER TABLE job ADD COLUMN keep_failed INTEGER NULL;
