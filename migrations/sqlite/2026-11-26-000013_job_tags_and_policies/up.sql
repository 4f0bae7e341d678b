-- Tags (issue 18): free labels people filter and select jobs by, stored `,a,b,` (delimited on
-- both sides, so one tag is matched by LIKE '%,tag,%') or '' for none; at most 20 tags of 1 to
-- 63 ASCII characters (1,301 bytes).
ALTER TABLE job ADD COLUMN tags TEXT NOT NULL DEFAULT '';
-- Per-job policies Kubernetes CronJob users expect (issue 18): a starting deadline (a slot not
-- started within this many seconds of its time has misfired; NULL: the admin's
-- misfire_threshold_ms), and how many succeeded and unsuccessful finished runs the job keeps
-- (NULL: all, until retention_days).
ALTER TABLE job ADD COLUMN start_deadline_s BIGINT;
ALTER TABLE job ADD COLUMN keep_succeeded INTEGER;
ALTER TABLE job ADD COLUMN keep_failed INTEGER;
