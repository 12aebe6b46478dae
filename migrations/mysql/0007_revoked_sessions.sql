-- Sessions ended before they expire (sign-out): every server reads the new rows once a second
-- and refuses their tokens until they would have expired anyway.
CREATE TABLE revoked_sessions (
    seq        BIGINT AUTO_INCREMENT PRIMARY KEY,
    session_id VARCHAR(32) NOT NULL UNIQUE,  -- 128 random bits, hex
    expires_at BIGINT NOT NULL,              -- when the token would have expired
    revoked_at BIGINT NOT NULL,
    INDEX revoked_sessions_by_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
