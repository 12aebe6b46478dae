-- The operator's order search: a product's orders, or all orders, in one status, newest first.
-- A Snowflake id begins with its creation time, so each index ends with the id and a search
-- reads its page straight off the index, without sorting every matching order. (Refunded and
-- cancelled orders are both stored as cancelled; the search tells them apart by refunded_at.)
CREATE INDEX orders_by_product_status ON orders (product_id, status, id);
CREATE INDEX orders_by_status ON orders (status, id);
