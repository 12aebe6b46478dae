-- Sessions ended before they expire (sign-out): every server reads the new rows once a second
-- and refuses their tokens until they would have expired anyway.
CREATE TABLE revoked_sessions (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE,  -- 128 random bits, hex
    expires_at INTEGER NOT NULL,      -- when the token would have expired
    revoked_at INTEGER NOT NULL
);
CREATE INDEX revoked_sessions_by_expiry ON revoked_sessions (expires_at);
