#!lua
-- Sets an outbox entry no worker can ever store aside, in one step so it is never both buried
-- and still pending. KEYS[1] = outbox stream, KEYS[2] = dead stream (one hash tag). ARGV =
-- group, entry id, the order as stored in the entry, the reason.
redis.call('XADD', KEYS[2], '*', 'order', ARGV[3], 'reason', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
