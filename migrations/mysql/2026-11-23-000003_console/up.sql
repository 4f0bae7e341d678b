-- Console sessions: the cookie holds a random token, the table its SHA-256, so a copy of the
-- database logs nobody in. Each session has its own CSRF token for the console's forms.
CREATE TABLE console_session (
    id_hash VARCHAR(64) NOT NULL PRIMARY KEY,
    user_id BIGINT NOT NULL,
    csrf_token VARCHAR(64) NOT NULL,
    ip VARCHAR(64) NOT NULL,
    created_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    FOREIGN KEY (user_id) REFERENCES `user` (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE INDEX ix_console_session_user ON console_session (user_id);
CREATE INDEX ix_console_session_expires ON console_session (expires_ms);
