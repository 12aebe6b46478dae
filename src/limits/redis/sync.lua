#!lua
-- One server's sync of the shared rate limits, in one atomic step: its new requests added to the
-- limits' window hashes, every total it asked for read back, and the servers alive counted.
-- KEYS = the hash of the servers' last syncs (node id -> Redis's clock, ms), then one hash per
-- group: a limit's fixed window, id -> requests (under one hash tag, so they live on one shard).
-- ARGV = this server's node id, how long (ms) a server counts as alive after its last sync; then
-- for each group: how long (ms) its hash must live, its number of ids, and per id the id and the
-- requests to add (0: read only).
-- Returns, as one text of numbers joined by commas, the number of servers alive (this one
-- included), then each id's total, in order.
--
-- Every redis.call has a fixed cost, so a group is read with one call and written with one,
-- whatever its number of ids. The answer is text because the totals are at hand as text, and a
-- client reads one string far faster than a list of numbers.
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local alive_for = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], now)
local servers = redis.call('HGETALL', KEYS[1])
local alive = 0
for i = 1, #servers, 2 do
  if now - tonumber(servers[i + 1]) > alive_for then
    redis.call('HDEL', KEYS[1], servers[i])
  else
    alive = alive + 1
  end
end
redis.call('PEXPIRE', KEYS[1], alive_for)

-- The numbers of the call's texts, each converted once: most adds are 1, most totals small.
local numbers = {}
local function number(text)
  local n = numbers[text]
  if not n then
    n = tonumber(text)
    numbers[text] = n
  end
  return n
end
local answers = { string.format('%d', alive) }
local a = 3
for g = 2, #KEYS do
  local expire, n = ARGV[a], tonumber(ARGV[a + 1])
  local ids = {}
  for i = 1, n do
    ids[i] = ARGV[a + 2 * i]
  end
  local totals = redis.call('HMGET', KEYS[g], unpack(ids))
  local fields = {}
  for i = 1, n do
    local add = number(ARGV[a + 2 * i + 1])
    local had = totals[i] and number(totals[i])
    local total = had and totals[i] or '0'
    if add > 0 then
      -- As text: redis.call prints a Lua number with '%.17g', a slower path than '%d'.
      total = string.format('%d', (had or 0) + add)
      fields[#fields + 1] = ids[i]
      fields[#fields + 1] = total
    end
    answers[#answers + 1] = total
  end
  if #fields > 0 then
    redis.call('HSET', KEYS[g], unpack(fields))
    redis.call('PEXPIRE', KEYS[g], expire)
  end
  a = a + 2 + 2 * n
end
return table.concat(answers, ',')
