-- The MySQL / MariaDB schema; the same tables as migrations/sqlite, explained there. InnoDB for
-- transactions and row locks; VARCHAR where a key or index needs a bounded length; every
-- integer BIGINT so one Rust type (i64) reads them all.

CREATE TABLE settings (
    name  VARCHAR(64) PRIMARY KEY,
    value TEXT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE users (
    id            BIGINT AUTO_INCREMENT PRIMARY KEY,
    username      VARCHAR(32) NOT NULL UNIQUE,
    password_hash VARCHAR(255) NOT NULL,
    created_at    BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE sale_events (
    id         BIGINT AUTO_INCREMENT PRIMARY KEY,
    title      VARCHAR(100) NOT NULL,
    starts_at  BIGINT NOT NULL,
    ends_at    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    CHECK (starts_at < ends_at),
    INDEX sale_events_by_start (starts_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE products (
    id                   BIGINT AUTO_INCREMENT PRIMARY KEY,
    event_id             BIGINT NULL,
    name                 VARCHAR(200) NOT NULL,
    image_url            VARCHAR(500) NOT NULL,
    original_price_cents BIGINT NOT NULL CHECK (original_price_cents >= 0),
    sale_price_cents     BIGINT NOT NULL CHECK (sale_price_cents >= 0),
    stock_total          BIGINT NOT NULL CHECK (stock_total >= 0),
    stock                BIGINT NOT NULL,
    per_user_limit       BIGINT NOT NULL CHECK (per_user_limit >= 1),
    sale_starts_at       BIGINT NOT NULL,
    sale_ends_at         BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    CHECK (stock >= 0 AND stock <= stock_total),
    CHECK (sale_starts_at < sale_ends_at),
    INDEX products_by_event (event_id),
    FOREIGN KEY (event_id) REFERENCES sale_events (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE orders (
    id               BIGINT PRIMARY KEY,
    user_id          BIGINT NOT NULL,
    product_id       BIGINT NOT NULL,
    product_name     VARCHAR(200) NOT NULL,
    unit_price_cents BIGINT NOT NULL,
    quantity         BIGINT NOT NULL CHECK (quantity >= 1),
    total_cents      BIGINT NOT NULL,
    status           VARCHAR(16) NOT NULL CHECK (status IN ('awaiting_payment', 'paid', 'cancelled')),
    created_at       BIGINT NOT NULL,
    pay_before       BIGINT NOT NULL,
    paid_at          BIGINT NULL,
    cancelled_at     BIGINT NULL,
    INDEX orders_by_user (user_id, created_at),
    INDEX orders_by_deadline (status, pay_before),
    INDEX orders_by_product_user (product_id, user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
