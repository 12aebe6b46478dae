-- The operator's controls of a live sale. A paused product refuses every buy until it is
-- resumed; the gate loads it paused, so a rebuilt gate keeps it paused. (Ending a sale early
-- moves its window's end, which needs no column.)
ALTER TABLE products ADD COLUMN paused_at BIGINT NULL;  -- when buying was paused; NULL while buying is allowed
