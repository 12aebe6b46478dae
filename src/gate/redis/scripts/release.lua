#!lua
-- Gives an order's units back and lowers its buyer's count, once per order whatever the number
-- of calls. KEYS[1] = sale hash, KEYS[2] = buyers hash, KEYS[3] = set of released order ids.
-- ARGV = user id, units, order id. Returns 1 if released now, 0 if already released or the
-- product is not loaded.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[3], ARGV[3]) == 0 then
  return 0
end
local units = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'remaining', units)
if redis.call('HINCRBY', KEYS[2], ARGV[1], -units) <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
