CREATE TABLE run_report_daily_old (
    day TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    timed_out BIGINT NOT NULL DEFAULT 0,
    killed BIGINT NOT NULL DEFAULT 0,
    lost BIGINT NOT NULL DEFAULT 0,
    skipped BIGINT NOT NULL DEFAULT 0,
    in_flight BIGINT NOT NULL DEFAULT 0,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (day, job_id)
);
INSERT INTO run_report_daily_old (day, job_id, succeeded, failed, timed_out, killed, lost,
    skipped, in_flight, updated_ms)
SELECT day, job_id, SUM(succeeded), SUM(failed), SUM(timed_out), SUM(killed), SUM(lost),
    SUM(skipped), SUM(in_flight), MAX(updated_ms)
FROM run_report_daily GROUP BY day, job_id;
DROP TABLE run_report_daily;
ALTER TABLE run_report_daily_old RENAME TO run_report_daily;
