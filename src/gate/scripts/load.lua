-- Preheat: loads a product unless it is already loaded (another server may have been first, and
-- buys may already be running against it). KEYS[1] = sale hash, KEYS[2] = buyers hash,
-- KEYS[3] = released set, KEYS[4] = outbox stream. ARGV = remaining, start, end, limit,
-- group name, then user id / units pairs: the database's view.
-- Orders still in the outbox were sold but are not in the database yet: their units are not
-- on sale and their buyers hold them. Returns 1 if loaded now, 0 if it was there.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3])
for i = 6, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local remaining = tonumber(ARGV[1])
for _, entry in ipairs(redis.call('XRANGE', KEYS[4], '-', '+')) do
  local fields = entry[2]
  local user, qty
  for i = 1, #fields, 2 do
    if fields[i] == 'user' then user = fields[i + 1] end
    if fields[i] == 'qty' then qty = tonumber(fields[i + 1]) end
  end
  if user and qty then
    remaining = remaining - qty
    redis.call('HINCRBY', KEYS[2], user, qty)
  end
end
-- Below zero only if entries already stored were counted again: sell nothing rather than guess.
if remaining < 0 then
  remaining = 0
end
-- The readers' group, unless it exists (then its readers keep their place).
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[5], '0', 'MKSTREAM')
redis.call('HSET', KEYS[1], 'remaining', remaining, 'start', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4])
return 1
