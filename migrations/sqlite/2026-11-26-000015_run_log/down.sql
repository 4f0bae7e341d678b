DROP TABLE run_log;
