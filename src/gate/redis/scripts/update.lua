#!lua
-- Changes a loaded product: ARGV[1] = "configure" with start, end, limit; "add" with units; or
-- "pause" with 1 (paused) or 0 (resumed). KEYS[1] = sale hash. Returns 1 if the product is
-- loaded (and changed), 0 if not.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[1] == 'add' then
  redis.call('HINCRBY', KEYS[1], 'remaining', ARGV[2])
elseif ARGV[1] == 'pause' then
  redis.call('HSET', KEYS[1], 'paused', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'start', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4])
end
return 1
