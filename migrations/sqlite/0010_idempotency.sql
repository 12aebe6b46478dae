-- Idempotency keys (`Idempotency-Key`). A buy's key is kept with its order, so its retry is
-- answered with that order, also after a restart (the gate is rebuilt from here). One user's
-- key names one order at a time: once a key's lifetime has passed, an order placed with it
-- again takes it over.
ALTER TABLE orders ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX orders_by_idempotency_key ON orders (user_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The answers of pay calls made with a key, so a retry gets the same pay URL; kept for the
-- key's lifetime.
CREATE TABLE pay_answers (
    user_id         INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    order_id        INTEGER NOT NULL,
    channel         TEXT NOT NULL,     -- what was asked: the order and the channel
    pay_url         TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (user_id, idempotency_key)
);
CREATE INDEX pay_answers_by_age ON pay_answers (created_at);
