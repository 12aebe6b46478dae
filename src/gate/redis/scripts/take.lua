#!lua
-- Takes units from a bucket for another one that ran dry: the first step of a transfer.
-- KEYS[1] = the giving bucket's sale hash, KEYS[2] = its transfers hash. ARGV = the transfer's
-- id, the receiving bucket's hash tag, the units the receiver needs. Takes half of what is left
-- (at least what is needed, at most all), and records the transfer until the receiver has it,
-- so a crash between the two steps loses nothing (src/gate/redis/transfer.rs settles it).
-- Returns {units taken, units left here, transfers from here not yet settled before this one};
-- {-1, 0, 0} when the bucket is not loaded.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0, 0}
end
local left = tonumber(redis.call('HGET', KEYS[1], 'remaining'))
local pending = redis.call('HLEN', KEYS[2])
local take = math.max(tonumber(ARGV[3]), math.ceil(left / 2))
if take > left then
  take = left
end
if take > 0 then
  redis.call('HINCRBY', KEYS[1], 'remaining', -take)
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. take)
end
return {take, left - take, pending}
