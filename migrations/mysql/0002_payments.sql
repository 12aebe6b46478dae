-- Payments through a provider. An order is paid only on the provider's verified word, and
-- every accepted word is kept for audit; money that arrives for a cancelled order is refunded,
-- and the order records when.
ALTER TABLE orders ADD COLUMN pay_started_at BIGINT NULL;  -- a pay URL was made: ask the provider before cancelling
ALTER TABLE orders ADD COLUMN refunded_at BIGINT NULL;     -- paid after its cancel, and refunded
CREATE TABLE payment_records (
    record_key   VARCHAR(160) PRIMARY KEY,  -- the notification's notify_id, or "query:" and the trade number
    order_id     BIGINT NOT NULL,
    provider     VARCHAR(16) NOT NULL,
    trade_no     VARCHAR(128) NOT NULL,
    amount_cents BIGINT NOT NULL,
    trade_status VARCHAR(32) NOT NULL,
    paid         BIGINT NOT NULL,           -- 1 when the status means the money arrived
    received_at  BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
CREATE INDEX payment_records_by_order ON payment_records (order_id);
