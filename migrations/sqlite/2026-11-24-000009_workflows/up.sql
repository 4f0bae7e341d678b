-- Workflows (issue 16): DAGs of jobs. A workflow run copies the definition it started with,
-- so editing a workflow never changes a run in progress.
CREATE TABLE workflow (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    definition TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '',
    concurrency TEXT NOT NULL DEFAULT 'allow',
    timeout_s BIGINT NOT NULL DEFAULT 0,
    -- A run that ends failed or timed out raises `workflow_failed` on these channels.
    alert_on_failure BOOLEAN NOT NULL DEFAULT 0,
    alert_channels TEXT NOT NULL DEFAULT '',
    enabled BOOLEAN NOT NULL DEFAULT 1,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX uk_workflow_name ON workflow (group_id, name);

CREATE TABLE workflow_run (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    status TEXT NOT NULL,
    definition TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '',
    trigger_kind TEXT NOT NULL,
    -- Nodes not final yet; the run is final when this reaches 0.
    open_nodes INTEGER NOT NULL,
    -- Nodes that failed (or were cancelled) with no failure/always edge to handle it.
    unhandled_failures INTEGER NOT NULL DEFAULT 0,
    deadline_ms BIGINT,
    message TEXT NOT NULL DEFAULT '',
    created_ms BIGINT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT
);
CREATE INDEX ix_workflow_run_workflow ON workflow_run (workflow_id, id);
CREATE INDEX ix_workflow_run_status ON workflow_run (status, id);

-- One row per node of a run. `attempt` grows with each re-run from failure; the counters are
-- updated by each upstream node's end, inside the transaction that ends it, so that whichever
-- admin ends the last upstream node starts this one, once (its status moves waiting → running
-- by a conditional update).
CREATE TABLE workflow_node (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_run_id BIGINT NOT NULL,
    node_key TEXT NOT NULL,
    job_id BIGINT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    status TEXT NOT NULL,
    upstream_total INTEGER NOT NULL,
    upstream_resolved INTEGER NOT NULL DEFAULT 0,
    upstream_met INTEGER NOT NULL DEFAULT 0,
    outputs TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    started_ms BIGINT,
    finished_ms BIGINT
);
CREATE UNIQUE INDEX uk_workflow_node_key ON workflow_node (workflow_run_id, node_key);

-- A job run started by a workflow node: which node and which of its attempts; per-run
-- overrides of the job (timeout, environment) and the outputs the run published.
ALTER TABLE job_run ADD COLUMN workflow_node_id BIGINT;
ALTER TABLE job_run ADD COLUMN node_attempt INTEGER;
ALTER TABLE job_run ADD COLUMN timeout_s BIGINT;
ALTER TABLE job_run ADD COLUMN env TEXT;
ALTER TABLE job_run ADD COLUMN outputs TEXT;
-- A node attempt has one run per retry attempt (and shard, for a sharding broadcast job): a
-- node never starts twice.
CREATE UNIQUE INDEX uk_job_run_node ON job_run (workflow_node_id, node_attempt, attempt, shard_index);
