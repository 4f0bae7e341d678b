-- Console sessions: the cookie holds a random token, the table its SHA-256, so a copy of the
-- database logs nobody in. Each session has its own CSRF token for the console's forms.
CREATE TABLE console_session (
    id_hash TEXT PRIMARY KEY NOT NULL,
    user_id BIGINT NOT NULL REFERENCES user (id) ON DELETE CASCADE,
    csrf_token TEXT NOT NULL,
    ip TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX ix_console_session_user ON console_session (user_id);
CREATE INDEX ix_console_session_expires ON console_session (expires_ms);
