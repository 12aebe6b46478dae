-- Forgets outbox entries whose orders are now safe downstream (in the database, or confirmed by
-- RabbitMQ): acknowledged for the group and deleted, so the stream holds only orders in flight.
-- KEYS[1] = outbox stream. ARGV = group name, then entry ids. Returns the entries deleted.
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return redis.call('XDEL', KEYS[1], unpack(ids))
