-- Alerting: where alerts go (channels) and the outbox of alerts to send (events). An event is
-- written in the transaction that makes its run final, so an alert exists iff that status does;
-- a delivery worker sends it afterwards.
CREATE TABLE alert_channel (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(100) NOT NULL,
    kind VARCHAR(16) NOT NULL,
    format VARCHAR(16),
    target VARCHAR(4000) NOT NULL,
    secret VARCHAR(500),
    enabled BOOLEAN NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_alert_channel_name ON alert_channel (name);

-- No foreign keys: events are history and outlive the jobs, runs and channels they name.
CREATE TABLE alert_event (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind VARCHAR(32) NOT NULL,
    job_id BIGINT,
    group_id BIGINT,
    run_id BIGINT,
    channel_id BIGINT NOT NULL,
    dedupe_key VARCHAR(200) NOT NULL,
    title VARCHAR(500) NOT NULL,
    body TEXT NOT NULL,
    status VARCHAR(16) NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL,
    claimed_ms BIGINT,
    last_error VARCHAR(2000),
    created_ms BIGINT NOT NULL,
    sent_ms BIGINT
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX ix_alert_event_due ON alert_event (status, next_attempt_ms);
CREATE INDEX ix_alert_event_dedupe ON alert_event (dedupe_key, created_ms);
CREATE INDEX ix_alert_event_job ON alert_event (job_id, id);

ALTER TABLE job ADD COLUMN alert_on_no_agent BOOLEAN NOT NULL DEFAULT FALSE;
-- '' = never had a live agent, 'live', 'none' = had one and lost the last: the transition to
-- 'none' is a conditional UPDATE, so one admin of a cluster raises `group_no_agent`.
ALTER TABLE executor_group ADD COLUMN agents_state VARCHAR(8) NOT NULL DEFAULT '';
