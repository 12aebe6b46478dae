#!lua
-- Forgets outbox entries whose orders are stored: acknowledged for the group and deleted, so the
-- stream holds exactly the orders sold but not in the database yet (those relayed to RabbitMQ
-- included: the relay only acknowledges; the worker that stores them deletes them).
-- KEYS[1] = outbox stream. ARGV = group name, then entry ids (a few thousand at most: Lua's
-- unpack has a limit). Returns the entries deleted.
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return redis.call('XDEL', KEYS[1], unpack(ids))
