-- The embedded schema. Times are Unix milliseconds (INTEGER) everywhere: one portable unit
-- that sorts and compares without time-zone surprises.

-- Values the server generates once and must keep across restarts (token secret, admin token).
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL, -- argon2id PHC string
    created_at    INTEGER NOT NULL
);

-- Sale events (场次): time slots that group products.
CREATE TABLE sale_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    title      TEXT NOT NULL,
    starts_at  INTEGER NOT NULL,
    ends_at    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    CHECK (starts_at < ends_at)
);
CREATE INDEX sale_events_by_start ON sale_events (starts_at);

-- `stock` is what is left to sell: persisted orders take from it with a guarded decrement,
-- cancelled orders give back. The CHECK is the last line against overselling.
CREATE TABLE products (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id             INTEGER REFERENCES sale_events (id),
    name                 TEXT NOT NULL,
    image_url            TEXT NOT NULL,
    original_price_cents INTEGER NOT NULL CHECK (original_price_cents >= 0),
    sale_price_cents     INTEGER NOT NULL CHECK (sale_price_cents >= 0),
    stock_total          INTEGER NOT NULL CHECK (stock_total >= 0),
    stock                INTEGER NOT NULL CHECK (stock >= 0 AND stock <= stock_total),
    per_user_limit       INTEGER NOT NULL CHECK (per_user_limit >= 1),
    sale_starts_at       INTEGER NOT NULL,
    sale_ends_at         INTEGER NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    CHECK (sale_starts_at < sale_ends_at)
);
CREATE INDEX products_by_event ON products (event_id);

-- Orders are written in batches; the Snowflake id made by the server is the primary key, so
-- writing the same order twice is a no-op. No foreign keys here on purpose: one bad row must
-- never fail the whole batch it was committed with (ids are checked before the gate).
CREATE TABLE orders (
    id               INTEGER PRIMARY KEY,
    user_id          INTEGER NOT NULL,
    product_id       INTEGER NOT NULL,
    product_name     TEXT NOT NULL,     -- snapshot at purchase time
    unit_price_cents INTEGER NOT NULL,  -- snapshot at purchase time
    quantity         INTEGER NOT NULL CHECK (quantity >= 1),
    total_cents      INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('awaiting_payment', 'paid', 'cancelled')),
    created_at       INTEGER NOT NULL,
    pay_before       INTEGER NOT NULL,
    paid_at          INTEGER,
    cancelled_at     INTEGER
);
CREATE INDEX orders_by_user ON orders (user_id, created_at);
CREATE INDEX orders_by_deadline ON orders (status, pay_before);
CREATE INDEX orders_by_product_user ON orders (product_id, user_id);
