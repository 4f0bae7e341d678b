DROP INDEX ix_job_run_status_triggered;
DROP TABLE run_report_daily;
