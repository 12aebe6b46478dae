#!lua
-- Gives a transfer's units to the bucket that needed them, once whatever the number of calls:
-- the second step of a transfer. KEYS[1] = the receiving bucket's sale hash, KEYS[2] = its mark
-- of this transfer (kept a day, far longer than a transfer is in flight). ARGV = the units.
-- Returns the units the bucket has now, or -1 when it is not loaded (the transfer stays
-- recorded at the giver, and a rebuild of the product drops both).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', 86400000) then
  return redis.call('HINCRBY', KEYS[1], 'remaining', ARGV[1])
end
return tonumber(redis.call('HGET', KEYS[1], 'remaining'))
