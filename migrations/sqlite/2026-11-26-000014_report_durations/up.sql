-- Reports (issue 18). The daily rollup gains the group the runs ran in (a job may move between
-- groups, and a run's group is what decides who sees it) and a duration histogram per day, group
-- and job: `bucket:count` pairs of domain::duration_histogram, '' when no run both started and
-- finished, NULL for days rolled up before this migration (they report no percentiles).
-- SQLite cannot change a primary key in place: the table is rebuilt.
CREATE TABLE run_report_daily_new (
    day TEXT NOT NULL,
    group_id BIGINT NOT NULL,
    job_id BIGINT NOT NULL,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    timed_out BIGINT NOT NULL DEFAULT 0,
    killed BIGINT NOT NULL DEFAULT 0,
    lost BIGINT NOT NULL DEFAULT 0,
    skipped BIGINT NOT NULL DEFAULT 0,
    in_flight BIGINT NOT NULL DEFAULT 0,
    durations TEXT,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (day, group_id, job_id)
);
-- Existing rows take the group of the job's latest run, else the job's, else 0 (no group:
-- only admins see it).
INSERT INTO run_report_daily_new (day, group_id, job_id, succeeded, failed, timed_out, killed,
    lost, skipped, in_flight, durations, updated_ms)
SELECT r.day,
    COALESCE(
        (SELECT jr.group_id FROM job_run jr WHERE jr.job_id = r.job_id ORDER BY jr.id DESC LIMIT 1),
        (SELECT j.group_id FROM job j WHERE j.id = r.job_id),
        0),
    r.job_id, r.succeeded, r.failed, r.timed_out, r.killed, r.lost, r.skipped, r.in_flight,
    NULL, r.updated_ms
FROM run_report_daily r;
DROP TABLE run_report_daily;
ALTER TABLE run_report_daily_new RENAME TO run_report_daily;
