-- Operators disable abusive accounts. A disabled account cannot sign in; `disabled_at` is when
-- it was disabled (NULL: enabled).
ALTER TABLE users ADD COLUMN disabled_at INTEGER;

-- A token proves itself without I/O, so disabling an account cannot take back the tokens it
-- already holds: instead every server reads these rows once a second (by `seq`, as it reads
-- revoked_sessions) and refuses the account's tokens issued at or before `cut_at`. A row is of
-- no use once every such token has expired (`expires_at`).
CREATE TABLE user_cutoffs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL,
    cut_at     INTEGER NOT NULL,  -- tokens issued at or before it are refused
    expires_at INTEGER NOT NULL   -- when the last of them expires
);
CREATE INDEX user_cutoffs_by_expiry ON user_cutoffs (expires_at);
