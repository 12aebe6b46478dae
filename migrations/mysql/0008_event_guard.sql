-- Guarded sale events: what a buyer must show besides a session. `token`: a buy token the sale
-- page fetches shortly before the start; `challenge`: the same, handed out only for the answer
-- to a proof-of-work puzzle. Existing events keep selling as before.
ALTER TABLE sale_events ADD COLUMN guard VARCHAR(16) NOT NULL DEFAULT 'none'
    CHECK (guard IN ('none', 'token', 'challenge'));
