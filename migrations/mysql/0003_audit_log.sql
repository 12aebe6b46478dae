-- The operators' changes (console and admin API), newest read first: who, what, when.
CREATE TABLE audit_log (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    actor       VARCHAR(64) NOT NULL,   -- "admin", or the admin token's fingerprint
    action      VARCHAR(500) NOT NULL,  -- a short description naming the ids changed
    recorded_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
