DROP INDEX ix_job_run_status_triggered ON job_run;
DROP TABLE run_report_daily;
