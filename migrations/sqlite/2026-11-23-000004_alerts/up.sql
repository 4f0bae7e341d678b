-- Alerting: where alerts go (channels) and the outbox of alerts to send (events). An event is
-- written in the transaction that makes its run final, so an alert exists iff that status does;
-- a delivery worker sends it afterwards.
CREATE TABLE alert_channel (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    format TEXT,
    target TEXT NOT NULL,
    secret TEXT,
    enabled BOOLEAN NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_alert_channel_name ON alert_channel (name);

-- No foreign keys: events are history and outlive the jobs, runs and channels they name.
CREATE TABLE alert_event (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    kind TEXT NOT NULL,
    job_id BIGINT,
    group_id BIGINT,
    run_id BIGINT,
    channel_id BIGINT NOT NULL,
    dedupe_key TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL,
    claimed_ms BIGINT,
    last_error TEXT,
    created_ms BIGINT NOT NULL,
    sent_ms BIGINT
);
CREATE INDEX ix_alert_event_due ON alert_event (status, next_attempt_ms);
CREATE INDEX ix_alert_event_dedupe ON alert_event (dedupe_key, created_ms);
CREATE INDEX ix_alert_event_job ON alert_event (job_id, id);

ALTER TABLE job ADD COLUMN alert_on_no_agent BOOLEAN NOT NULL DEFAULT 0;
-- '' = never had a live agent, 'live', 'none' = had one and lost the last: the transition to
-- 'none' is a conditional UPDATE, so one admin of a cluster raises `group_no_agent`.
ALTER TABLE executor_group ADD COLUMN agents_state TEXT NOT NULL DEFAULT '';
