-- Times are UTC milliseconds (BIGINT). Enums are short lowercase strings.
CREATE TABLE executor_group (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    app_name VARCHAR(64) NOT NULL,
    title VARCHAR(200) NOT NULL,
    address_mode VARCHAR(16) NOT NULL,
    addresses VARCHAR(4000) NOT NULL DEFAULT '',
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_executor_group_app_name ON executor_group (app_name);

CREATE TABLE agent (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    app_name VARCHAR(64) NOT NULL,
    address VARCHAR(255) NOT NULL,
    version VARCHAR(64) NOT NULL DEFAULT '',
    hostname VARCHAR(255) NOT NULL DEFAULT '',
    registered_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    metrics MEDIUMTEXT NOT NULL,
    limits_mode VARCHAR(16) NOT NULL DEFAULT ''
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_agent_app_address ON agent (app_name, address);

CREATE TABLE job (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    group_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    description VARCHAR(2000) NOT NULL DEFAULT '',
    schedule_type VARCHAR(16) NOT NULL,
    schedule_expr VARCHAR(255),
    interval_s BIGINT,
    once_at_ms BIGINT,
    timezone VARCHAR(64) NOT NULL,
    handler_type VARCHAR(16) NOT NULL,
    command MEDIUMTEXT,
    script_source MEDIUMTEXT,
    script_version INTEGER NOT NULL DEFAULT 0,
    interpreter VARCHAR(32),
    bean_name VARCHAR(200),
    params MEDIUMTEXT NOT NULL,
    routing VARCHAR(32) NOT NULL,
    enabled BOOLEAN NOT NULL,
    timeout_s BIGINT NOT NULL,
    retry_count INTEGER NOT NULL,
    retry_backoff_s BIGINT NOT NULL,
    limit_cpu DOUBLE,
    limit_memory_mb BIGINT,
    limit_pids BIGINT,
    misfire VARCHAR(32) NOT NULL,
    concurrency VARCHAR(16) NOT NULL,
    block_strategy VARCHAR(32) NOT NULL,
    children VARCHAR(2000) NOT NULL DEFAULT '',
    alert_on_failure BOOLEAN NOT NULL,
    alert_on_timeout BOOLEAN NOT NULL,
    alert_on_lost BOOLEAN NOT NULL,
    alert_channels VARCHAR(2000) NOT NULL DEFAULT '',
    next_fire_ms BIGINT,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    FOREIGN KEY (group_id) REFERENCES executor_group (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_job_group_name ON job (group_id, name);
CREATE INDEX ix_job_due ON job (enabled, next_fire_ms);

CREATE TABLE job_script (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id BIGINT NOT NULL,
    version INTEGER NOT NULL,
    source MEDIUMTEXT NOT NULL,
    interpreter VARCHAR(32) NOT NULL,
    note VARCHAR(500) NOT NULL DEFAULT '',
    created_by VARCHAR(200) NOT NULL,
    created_ms BIGINT NOT NULL,
    FOREIGN KEY (job_id) REFERENCES job (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_job_script_version ON job_script (job_id, version);

CREATE TABLE job_run (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    first_run_id BIGINT,
    attempt INTEGER NOT NULL,
    trigger_kind VARCHAR(16) NOT NULL,
    fire_slot_ms BIGINT,
    scheduled_ms BIGINT NOT NULL,
    status VARCHAR(16) NOT NULL,
    agent_address VARCHAR(255),
    params MEDIUMTEXT NOT NULL,
    shard_index INTEGER NOT NULL DEFAULT 0,
    shard_total INTEGER NOT NULL DEFAULT 1,
    trigger_msg MEDIUMTEXT,
    triggered_ms BIGINT,
    started_ms BIGINT,
    finished_ms BIGINT,
    handle_code INTEGER,
    handle_msg MEDIUMTEXT,
    exit_code INTEGER,
    term_signal INTEGER,
    cpu_ms BIGINT,
    max_rss_kb BIGINT,
    oom_killed BOOLEAN,
    limits_mode VARCHAR(16),
    created_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
-- The no-double-fire invariant: one row per (job, scheduled slot, shard); manual runs have a NULL slot.
CREATE UNIQUE INDEX uk_job_run_slot ON job_run (job_id, fire_slot_ms, shard_index);
CREATE INDEX ix_job_run_job ON job_run (job_id, id);
CREATE INDEX ix_job_run_status ON job_run (status, id);
CREATE INDEX ix_job_run_created ON job_run (created_ms);

CREATE TABLE `user` (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    username VARCHAR(64) NOT NULL,
    password_hash VARCHAR(255) NOT NULL,
    role VARCHAR(16) NOT NULL,
    disabled BOOLEAN NOT NULL,
    password_changed_ms BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_user_username ON `user` (username);

CREATE TABLE user_group_grant (
    user_id BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    PRIMARY KEY (user_id, group_id),
    FOREIGN KEY (user_id) REFERENCES `user` (id) ON DELETE CASCADE,
    FOREIGN KEY (group_id) REFERENCES executor_group (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE api_token (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    token_hash VARCHAR(64) NOT NULL,
    prefix VARCHAR(16) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT,
    revoked_ms BIGINT,
    last_used_ms BIGINT,
    FOREIGN KEY (user_id) REFERENCES `user` (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_api_token_hash ON api_token (token_hash);

CREATE TABLE audit_log (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor_kind VARCHAR(16) NOT NULL,
    actor_id BIGINT,
    actor_name VARCHAR(200) NOT NULL,
    ip VARCHAR(64) NOT NULL,
    action VARCHAR(64) NOT NULL,
    object_type VARCHAR(32) NOT NULL,
    object_id VARCHAR(64) NOT NULL,
    before_json MEDIUMTEXT,
    after_json MEDIUMTEXT,
    request_id VARCHAR(64) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX ix_audit_log_at ON audit_log (at_ms);
CREATE INDEX ix_audit_log_object ON audit_log (object_type, object_id);

CREATE TABLE scheduler_lock (
    name VARCHAR(200) PRIMARY KEY NOT NULL,
    holder VARCHAR(200) NOT NULL DEFAULT '',
    until_ms BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO scheduler_lock (name) VALUES ('schedule');
