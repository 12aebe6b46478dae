-- Payments through a provider. An order is paid only on the provider's verified word, and
-- every accepted word is kept for audit; money that arrives for a cancelled order is refunded,
-- and the order records when.
ALTER TABLE orders ADD COLUMN pay_started_at INTEGER NULL;  -- a pay URL was made: ask the provider before cancelling
ALTER TABLE orders ADD COLUMN refunded_at INTEGER NULL;     -- paid after its cancel, and refunded
CREATE TABLE payment_records (
    record_key   TEXT PRIMARY KEY,  -- the notification's notify_id, or "query:" and the trade number
    order_id     INTEGER NOT NULL,
    provider     TEXT NOT NULL,
    trade_no     TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    trade_status TEXT NOT NULL,
    paid         INTEGER NOT NULL,  -- 1 when the status means the money arrived
    received_at  INTEGER NOT NULL
);
CREATE INDEX payment_records_by_order ON payment_records (order_id);
