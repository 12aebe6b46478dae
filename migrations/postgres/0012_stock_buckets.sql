-- How many buckets a product's stock is split into in a shared gate, each on its own hash tag,
-- hence on its own shard of a Redis Cluster, so one hot product's buys spread over several
-- Redis cores. 1 (every product so far) keeps the whole stock in one place; an in-process gate
-- ignores it. Fixed once the product is loaded into the gate (`gate_loaded_at`).
ALTER TABLE products ADD COLUMN buckets BIGINT NOT NULL DEFAULT 1 CHECK (buckets BETWEEN 1 AND 64);
