#!lua
-- The sliding-window throttles of a batch of requests, in one atomic step, each request counted
-- as if it came alone, in the order given. A key's count is the two-window estimate: the
-- requests of the current fixed window, plus the previous window's weighted by the part of it
-- the sliding window still covers, as if they had come evenly.
-- Each limit (a scope with its quota) keeps one hash per fixed window, id → requests counted in
-- it, expiring when the next window is over.
-- KEYS = for each limit of the batch, the hash of the window before and of the current one
-- (under one hash tag, so they live on one shard).
-- ARGV = now (Unix ms, the caller's clock, which named the windows); the number of limits L,
-- then each limit's quota and window (ms); then for each request, its number of hits and for
-- each hit its limit (1 to L) and the id it counts.
-- Returns two values per request, one flat list: the place (from 0) of the hit that refused it
-- and the ms until it would pass; or -1 and 0 when every hit passed and was counted. The hits
-- of a request before the refusing one stay counted, those from it on are not.
--
-- Every redis.call has a fixed cost, so each limit's two windows are read with one call each
-- and written with one, whatever the number of requests and ids in the batch.
local now = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local limits = {}
for l = 1, count do
  local window = tonumber(ARGV[2 * l + 2])
  limits[l] = {
    quota = tonumber(ARGV[2 * l + 1]),
    window = window,
    elapsed = now % window,
    ids = {},
    previous = {},
    current = {},
    changed = {},
  }
end

-- The requests' hits, in one flat list: each request's count of hits, then its hits' limits
-- and ids.
local counts, hit_limits, hit_ids = {}, {}, {}
local a, h = 2 * count + 3, 0
local args = #ARGV
while a <= args do
  local n = tonumber(ARGV[a])
  counts[#counts + 1] = n
  for i = 1, n do
    local limit, id = limits[tonumber(ARGV[a + 2 * i - 1])], ARGV[a + 2 * i]
    h = h + 1
    hit_limits[h], hit_ids[h] = limit, id
    if not limit.current[id] then
      limit.current[id] = 0
      limit.ids[#limit.ids + 1] = id
    end
  end
  a = a + 2 * n + 1
end

for l, limit in ipairs(limits) do
  if #limit.ids > 0 then
    local previous = redis.call('HMGET', KEYS[2 * l - 1], unpack(limit.ids))
    local current = redis.call('HMGET', KEYS[2 * l], unpack(limit.ids))
    local p, c = limit.previous, limit.current
    for j, id in ipairs(limit.ids) do
      p[id] = tonumber(previous[j]) or 0
      c[id] = tonumber(current[j]) or 0
    end
  end
end

local answers = {}
local ceil = math.ceil
h = 0
for r, n in ipairs(counts) do
  local refused, wait = -1, 0
  for i = 1, n do
    local limit, id = hit_limits[h + i], hit_ids[h + i]
    local quota, window, elapsed = limit.quota, limit.window, limit.elapsed
    local p, c = limit.previous[id], limit.current[id]
    if p * (window - elapsed) / window + c + 1 <= quota then
      limit.current[id] = c + 1
      limit.changed[id] = true
    else
      refused = i - 1
      if c + 1 > quota then
        -- This window alone is full: wait for the next, then until this one weighs less.
        wait = window - elapsed + window * (1 - (quota - 1) / c)
      else
        wait = window - elapsed - window * (quota - 1 - c) / p
      end
      wait = ceil(wait)
      if wait < 1 then
        wait = 1
      end
      break
    end
  end
  h = h + n
  answers[2 * r - 1] = refused
  answers[2 * r] = wait
end

for l, limit in ipairs(limits) do
  local fields = {}
  for id in pairs(limit.changed) do
    fields[#fields + 1] = id
    fields[#fields + 1] = limit.current[id]
  end
  if #fields > 0 then
    redis.call('HSET', KEYS[2 * l], unpack(fields))
    redis.call('PEXPIRE', KEYS[2 * l], 2 * limit.window - limit.elapsed)
  end
end
return answers
