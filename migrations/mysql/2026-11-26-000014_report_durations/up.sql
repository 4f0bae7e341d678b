-- Reports (issue 18). The daily rollup gains the group the runs ran in (a job may move between
-- groups, and a run's group is what decides who sees it) and a duration histogram per day, group
-- and job: `bucket:count` pairs of domain::duration_histogram, '' when no run both started and
-- finished, NULL for days rolled up before this migration (they report no percentiles).
ALTER TABLE run_report_daily
    ADD COLUMN group_id BIGINT NOT NULL DEFAULT 0 AFTER day,
    ADD COLUMN durations TEXT NULL AFTER in_flight;
-- Existing rows take the group of the job's latest run, else the job's, else 0 (no group:
-- only admins see it).
UPDATE run_report_daily r SET group_id = COALESCE(
    (SELECT jr.group_id FROM job_run jr WHERE jr.job_id = r.job_id ORDER BY jr.id DESC LIMIT 1),
    (SELECT j.group_id FROM job j WHERE j.id = r.job_id),
    0);
ALTER TABLE run_report_daily DROP PRIMARY KEY, ADD PRIMARY KEY (day, group_id, job_id);
