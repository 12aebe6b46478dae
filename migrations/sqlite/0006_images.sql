-- Product images uploaded by operators, kept in the database so every server of a cluster
-- serves the same ones. An image is named by the SHA-256 of its bytes and never changes.
CREATE TABLE images (
    id           TEXT PRIMARY KEY,  -- the SHA-256 of content, as 64 lowercase hex digits
    content_type TEXT NOT NULL,     -- image/png, image/jpeg, image/gif or image/webp
    content      BLOB NOT NULL,
    size_bytes   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);
