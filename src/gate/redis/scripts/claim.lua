#!lua
-- A buyer's claim on an idempotency key (see `src/gate/redis/idempotency.rs`). KEYS[1] = the
-- claim. ARGV[1] = 'claim', 'free' or 'hold'; ARGV[2] = this buy's claim (`product:units:order
-- id`); ARGV[3] = the key's lifetime in ms.
-- claim: makes ARGV[2] the claim unless there is one; returns the claim there before, or false.
-- free: drops the claim if it is still ARGV[2]. hold: makes ARGV[2] the claim.
local op = ARGV[1]
if op == 'claim' then
  local held = redis.call('GET', KEYS[1])
  if not held then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  end
  return held
end
if op == 'free' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then
    redis.call('DEL', KEYS[1])
  end
  return false
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return false
