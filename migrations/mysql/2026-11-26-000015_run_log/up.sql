-- Logs kept by the admins (issue 18): see the SQLite migration of the same name. MEDIUMTEXT
-- holds up to 16 MiB, the largest `kept_log_bytes`.
CREATE TABLE run_log (
    run_id BIGINT PRIMARY KEY NOT NULL,
    state VARCHAR(16) CHARACTER SET ascii NOT NULL,
    content MEDIUMTEXT NOT NULL,
    bytes BIGINT NOT NULL,
    truncated BOOLEAN NOT NULL,
    updated_ms BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
