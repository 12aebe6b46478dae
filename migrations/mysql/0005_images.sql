-- Product images uploaded by operators, kept in the database so every server of a cluster
-- serves the same ones. An image is named by the SHA-256 of its bytes and never changes.
-- MEDIUMBLOB holds up to 16 MiB, above the largest max_image_bytes the configuration allows.
CREATE TABLE images (
    id           VARCHAR(64) PRIMARY KEY,  -- the SHA-256 of content, as 64 lowercase hex digits
    content_type VARCHAR(32) NOT NULL,     -- image/png, image/jpeg, image/gif or image/webp
    content      MEDIUMBLOB NOT NULL,
    size_bytes   BIGINT NOT NULL,
    created_at   BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
