DROP TABLE console_session;
