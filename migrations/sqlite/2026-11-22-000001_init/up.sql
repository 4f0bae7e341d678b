-- Times are UTC milliseconds (BIGINT). Enums are short lowercase strings.
CREATE TABLE executor_group (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name TEXT NOT NULL,
    title TEXT NOT NULL,
    address_mode TEXT NOT NULL,
    addresses TEXT NOT NULL DEFAULT '',
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_executor_group_app_name ON executor_group (app_name);

CREATE TABLE agent (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name TEXT NOT NULL,
    address TEXT NOT NULL,
    version TEXT NOT NULL DEFAULT '',
    hostname TEXT NOT NULL DEFAULT '',
    registered_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    metrics TEXT NOT NULL DEFAULT '{}',
    limits_mode TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX uk_agent_app_address ON agent (app_name, address);

CREATE TABLE job (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id BIGINT NOT NULL REFERENCES executor_group (id),
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    schedule_type TEXT NOT NULL,
    schedule_expr TEXT,
    interval_s BIGINT,
    once_at_ms BIGINT,
    timezone TEXT NOT NULL,
    handler_type TEXT NOT NULL,
    command TEXT,
    script_source TEXT,
    script_version INTEGER NOT NULL DEFAULT 0,
    interpreter TEXT,
    bean_name TEXT,
    params TEXT NOT NULL DEFAULT '',
    routing TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    timeout_s BIGINT NOT NULL,
    retry_count INTEGER NOT NULL,
    retry_backoff_s BIGINT NOT NULL,
    limit_cpu DOUBLE,
    limit_memory_mb BIGINT,
    limit_pids BIGINT,
    misfire TEXT NOT NULL,
    concurrency TEXT NOT NULL,
    block_strategy TEXT NOT NULL,
    children TEXT NOT NULL DEFAULT '',
    alert_on_failure BOOLEAN NOT NULL,
    alert_on_timeout BOOLEAN NOT NULL,
    alert_on_lost BOOLEAN NOT NULL,
    alert_channels TEXT NOT NULL DEFAULT '',
    next_fire_ms BIGINT,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_job_group_name ON job (group_id, name);
CREATE INDEX ix_job_due ON job (enabled, next_fire_ms);

CREATE TABLE job_script (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id BIGINT NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    source TEXT NOT NULL,
    interpreter TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_job_script_version ON job_script (job_id, version);

CREATE TABLE job_run (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    first_run_id BIGINT,
    attempt INTEGER NOT NULL,
    trigger_kind TEXT NOT NULL,
    fire_slot_ms BIGINT,
    scheduled_ms BIGINT NOT NULL,
    status TEXT NOT NULL,
    agent_address TEXT,
    params TEXT NOT NULL DEFAULT '',
    shard_index INTEGER NOT NULL DEFAULT 0,
    shard_total INTEGER NOT NULL DEFAULT 1,
    trigger_msg TEXT,
    triggered_ms BIGINT,
    started_ms BIGINT,
    finished_ms BIGINT,
    handle_code INTEGER,
    handle_msg TEXT,
    exit_code INTEGER,
    term_signal INTEGER,
    cpu_ms BIGINT,
    max_rss_kb BIGINT,
    oom_killed BOOLEAN,
    limits_mode TEXT,
    created_ms BIGINT NOT NULL
);
-- The no-double-fire invariant: one row per (job, scheduled slot, shard); manual runs have a NULL slot.
CREATE UNIQUE INDEX uk_job_run_slot ON job_run (job_id, fire_slot_ms, shard_index);
CREATE INDEX ix_job_run_job ON job_run (job_id, id);
CREATE INDEX ix_job_run_status ON job_run (status, id);
CREATE INDEX ix_job_run_created ON job_run (created_ms);

CREATE TABLE user (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL,
    disabled BOOLEAN NOT NULL,
    password_changed_ms BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_user_username ON user (username);

CREATE TABLE user_group_grant (
    user_id BIGINT NOT NULL REFERENCES user (id) ON DELETE CASCADE,
    group_id BIGINT NOT NULL REFERENCES executor_group (id) ON DELETE CASCADE,
    PRIMARY KEY (user_id, group_id)
);

CREATE TABLE api_token (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id BIGINT NOT NULL REFERENCES user (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    prefix TEXT NOT NULL,
    role TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT,
    revoked_ms BIGINT,
    last_used_ms BIGINT
);
CREATE UNIQUE INDEX uk_api_token_hash ON api_token (token_hash);

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms BIGINT NOT NULL,
    actor_kind TEXT NOT NULL,
    actor_id BIGINT,
    actor_name TEXT NOT NULL,
    ip TEXT NOT NULL,
    action TEXT NOT NULL,
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    before_json TEXT,
    after_json TEXT,
    request_id TEXT NOT NULL
);
CREATE INDEX ix_audit_log_at ON audit_log (at_ms);
CREATE INDEX ix_audit_log_object ON audit_log (object_type, object_id);

CREATE TABLE scheduler_lock (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL DEFAULT '',
    until_ms BIGINT NOT NULL DEFAULT 0
);
INSERT INTO scheduler_lock (name) VALUES ('schedule');
