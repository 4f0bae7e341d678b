-- Workflows (issue 16): see the SQLite migration of the same name for the why of each part.
CREATE TABLE workflow (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    group_id BIGINT NOT NULL,
    name VARCHAR(128) NOT NULL,
    description MEDIUMTEXT NOT NULL,
    definition MEDIUMTEXT NOT NULL,
    params MEDIUMTEXT NOT NULL,
    concurrency VARCHAR(16) NOT NULL DEFAULT 'allow',
    timeout_s BIGINT NOT NULL DEFAULT 0,
    -- A run that ends failed or timed out raises `workflow_failed` on these channels.
    alert_on_failure BOOLEAN NOT NULL DEFAULT FALSE,
    alert_channels VARCHAR(1024) NOT NULL DEFAULT '',
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_workflow_name ON workflow (group_id, name);

CREATE TABLE workflow_run (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    workflow_id BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    status VARCHAR(16) NOT NULL,
    definition MEDIUMTEXT NOT NULL,
    params MEDIUMTEXT NOT NULL,
    trigger_kind VARCHAR(16) NOT NULL,
    open_nodes INTEGER NOT NULL,
    unhandled_failures INTEGER NOT NULL DEFAULT 0,
    deadline_ms BIGINT,
    message MEDIUMTEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX ix_workflow_run_workflow ON workflow_run (workflow_id, id);
CREATE INDEX ix_workflow_run_status ON workflow_run (status, id);

CREATE TABLE workflow_node (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    workflow_run_id BIGINT NOT NULL,
    node_key VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    status VARCHAR(16) NOT NULL,
    upstream_total INTEGER NOT NULL,
    upstream_resolved INTEGER NOT NULL DEFAULT 0,
    upstream_met INTEGER NOT NULL DEFAULT 0,
    outputs MEDIUMTEXT NOT NULL,
    message MEDIUMTEXT NOT NULL,
    started_ms BIGINT,
    finished_ms BIGINT
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE UNIQUE INDEX uk_workflow_node_key ON workflow_node (workflow_run_id, node_key);

ALTER TABLE job_run ADD COLUMN workflow_node_id BIGINT;
ALTER TABLE job_run ADD COLUMN node_attempt INTEGER;
ALTER TABLE job_run ADD COLUMN timeout_s BIGINT;
ALTER TABLE job_run ADD COLUMN env MEDIUMTEXT;
ALTER TABLE job_run ADD COLUMN outputs MEDIUMTEXT;
CREATE UNIQUE INDEX uk_job_run_node ON job_run (workflow_node_id, node_attempt, attempt, shard_index);
