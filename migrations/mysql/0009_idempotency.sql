-- Idempotency keys (`Idempotency-Key`). A buy's key is kept with its order, so its retry is
-- answered with that order on any server, also after Redis lost its data (the gate is rebuilt
-- from here). One user's key names one order at a time: once a key's lifetime has passed, an
-- order placed with it again takes it over. Keys compare byte for byte (`ascii_bin`): `abc`
-- and `ABC` are two keys. A unique index lets any number of rows be NULL.
ALTER TABLE orders ADD COLUMN idempotency_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL;
CREATE UNIQUE INDEX orders_by_idempotency_key ON orders (user_id, idempotency_key);
-- The answers of pay calls made with a key, so a retry gets the same pay URL; kept for the
-- key's lifetime.
CREATE TABLE pay_answers (
    user_id         BIGINT NOT NULL,
    idempotency_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id        BIGINT NOT NULL,
    channel         VARCHAR(8) NOT NULL,   -- what was asked: the order and the channel
    pay_url         TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (user_id, idempotency_key),
    INDEX pay_answers_by_age (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
