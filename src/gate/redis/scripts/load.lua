#!lua
-- Preheat: loads a product unless it is already loaded (another server may have been first, and
-- buys may already be running against it). KEYS[1] = sale hash, KEYS[2] = buyers hash,
-- KEYS[3] = released set, KEYS[4] = the hash of orders kept by buyer and idempotency key.
-- ARGV = remaining, start, end, limit, paused (1 or 0), the number n of buyers, then n user id /
-- units pairs, the number m of cancelled orders and their m ids (their stock is back already,
-- so a late release of theirs must not add it again), then field / value pairs of the kept
-- orders (`user:key` / `made at:units:encoded order`, as the reserve script writes them).
-- Returns 1 if loaded now, 0 if it was there.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
local buyers = tonumber(ARGV[6])
for i = 7, 6 + 2 * buyers, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local at = 7 + 2 * buyers
local released = tonumber(ARGV[at])
for i = at + 1, at + released do
  redis.call('SADD', KEYS[3], ARGV[i])
end
at = at + released + 1
if at <= #ARGV then
  for i = at, #ARGV, 2 do
    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  end
  -- As the reserve script does: the hash goes a day (the keys' lifetime) after its last order.
  redis.call('PEXPIRE', KEYS[4], 86400000)
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[1], 'start', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4],
  'paused', ARGV[5])
return 1
