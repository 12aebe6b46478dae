-- The operator's order search: a product's orders in one status, newest first. A Snowflake id
-- begins with its creation time, so the index ends with the id and such a search reads its
-- page straight off it. It takes the place of the index by product and buyer, so an order's
-- insert maintains no more indexes than before (a payment or a cancel now updates one more):
-- the per-user counts of a gate's rebuild read the product's orders from it, and the
-- dashboard's paid units and a rebuild's cancelled orders read only the rows they count. A
-- search by status alone, or by product alone, sorts what it finds.
DROP INDEX orders_by_product_user ON orders;
CREATE INDEX orders_by_product_status ON orders (product_id, status, id);
