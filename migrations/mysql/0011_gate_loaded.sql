-- When a product was first loaded into the stock gate. A server that finds the gate without a
-- product that has this set knows the gate lost it (Redis restarted without its data), even if
-- the server started after the loss, and rebuilds it as a lost product.
ALTER TABLE products ADD COLUMN gate_loaded_at BIGINT NULL;
