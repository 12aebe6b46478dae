-- The buy, in one atomic step. KEYS[1] = the product's sale hash, KEYS[2] = its buyers hash,
-- KEYS[3] = its outbox stream, KEYS[4] = its recently taken order ids (all under the product's
-- hash tag, so they live on one shard). ARGV = user id, units, now (Unix ms), the encoded
-- order, its id. Returns {code, remaining}: 0 taken
-- (and the order appended to the outbox, in the same step, so it cannot be lost between gate
-- and queue), -1 not loaded, -2 not started, -3 ended, -4 per-user limit reached, -5 not
-- enough stock.
local sale = redis.call('HMGET', KEYS[1], 'remaining', 'start', 'end', 'limit')
if not sale[1] then
  return {-1, 0}
end
local remaining = tonumber(sale[1])
local now, units = tonumber(ARGV[3]), tonumber(ARGV[2])
-- A repeat of a buy already taken (a cluster client re-sends a script whose reply timed out)
-- answers as the first run did, instead of taking the stock twice. A minute of ids is kept:
-- re-sends come within seconds, and a longer memory costs a busy product megabytes.
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 60000)
if redis.call('ZSCORE', KEYS[4], ARGV[5]) then
  return {0, remaining}
end
if now < tonumber(sale[2]) then
  return {-2, remaining}
end
if now >= tonumber(sale[3]) then
  return {-3, remaining}
end
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if held + units > tonumber(sale[4]) then
  return {-4, remaining}
end
-- `<`, not `<=`: the last unit sells.
if remaining < units then
  return {-5, remaining}
end
redis.call('HINCRBY', KEYS[2], ARGV[1], units)
redis.call('XADD', KEYS[3], '*', 'order', ARGV[4])
redis.call('ZADD', KEYS[4], now, ARGV[5])
return {0, redis.call('HINCRBY', KEYS[1], 'remaining', -units)}
