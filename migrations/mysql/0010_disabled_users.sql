-- Disabled accounts and the cut-off of their tokens; explained in migrations/sqlite.
ALTER TABLE users ADD COLUMN disabled_at BIGINT NULL;

CREATE TABLE user_cutoffs (
    seq        BIGINT AUTO_INCREMENT PRIMARY KEY,
    user_id    BIGINT NOT NULL,
    cut_at     BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    INDEX user_cutoffs_by_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
