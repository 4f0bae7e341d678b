-- Logs that outlive their host (issue 18): a finished run's log as the admins keep it, read
-- from its agent after the run ended, bounded by `kept_log_bytes` (head and tail kept when the
-- log is longer). `state`: `fetching` (an admin claimed it), `kept`, or `missing` (the agent
-- could not give it; the run page then asks the agent as before). Deleted with its run.
CREATE TABLE run_log (
    run_id BIGINT PRIMARY KEY NOT NULL,
    state TEXT NOT NULL,
    content TEXT NOT NULL,
    -- The log's whole size as the agent had it, and whether `content` holds less than that.
    bytes BIGINT NOT NULL,
    truncated BOOLEAN NOT NULL,
    updated_ms BIGINT NOT NULL
);
