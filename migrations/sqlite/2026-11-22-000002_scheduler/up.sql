-- Daily outcome counts per job (UTC days), kept by the report monitor.
CREATE TABLE run_report_daily (
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
-- The monitors look for claimed-but-unsent and long-running runs by trigger time.
CREATE INDEX ix_job_run_status_triggered ON job_run (status, triggered_ms);
