-- Preheat: loads a product unless it is already loaded (another server may have been first, and
-- buys may already be running against it). KEYS[1] = sale hash, KEYS[2] = buyers hash,
-- KEYS[3] = released set. ARGV = remaining, start, end, limit, paused (1 or 0), the number n of
-- buyers, then n user id / units pairs, then the ids of cancelled orders (their stock is back
-- already, so a late release of theirs must not add it again). Returns 1 if loaded now, 0 if it
-- was there.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
local buyers = tonumber(ARGV[6])
for i = 7, 6 + 2 * buyers, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
for i = 7 + 2 * buyers, #ARGV do
  redis.call('SADD', KEYS[3], ARGV[i])
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[1], 'start', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4],
  'paused', ARGV[5])
return 1
