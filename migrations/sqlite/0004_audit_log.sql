-- The operators' changes (console and admin API), newest read first: who, what, when.
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    actor       TEXT NOT NULL,     -- "admin", or the admin token's fingerprint
    action      TEXT NOT NULL,     -- a short description naming the ids changed
    recorded_at INTEGER NOT NULL
);
