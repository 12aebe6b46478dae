-- Preheat: loads a product unless it is already loaded (another server may have been first, and
-- buys may already be running against it). KEYS[1] = sale hash, KEYS[2] = buyers hash,
-- KEYS[3] = released set. ARGV = remaining, start, end, limit, then user id / units pairs.
-- Returns 1 if loaded now, 0 if it was there.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[1], 'start', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4])
return 1
