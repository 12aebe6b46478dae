-- The sliding-window throttles of a batch of requests, in one atomic step, each request counted
-- as if it came alone, in the order given. A key's count is the two-window estimate: the
-- requests of the current fixed window, plus the previous window's weighted by the part of it
-- the sliding window still covers, as if they had come evenly.
-- KEYS = every hit's key, in order (under one hash tag, so they live on one shard).
-- ARGV = for each request, its number of hits, then for each hit its limit and its window (ms).
-- Returns two values per request, one flat list: the place (from 0) of the hit that refused it
-- and the ms until it would pass; or -1 and 0 when every hit passed and was counted. The hits
-- of a request before the refusing one stay counted, those from it on are not.
-- A key is a hash: `w` the number of its current window (Unix ms / window), `c` the requests
-- counted in it, `p` those of the window before. It expires when both windows are over.
--
-- Each key is read once and written once per batch, whatever the number of its hits (the
-- address and the sale event of a crowd are in every request).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local held = {}

local function state(key, window)
  local s = held[key]
  if s then
    return s
  end
  local index = math.floor(now / window)
  local stored = redis.call('HMGET', key, 'w', 'c', 'p')
  local w, c, p = tonumber(stored[1]), tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  s = { index = index, window = window, c = c, p = p, moved = w ~= index, counted = false }
  if s.moved then
    if w == index - 1 then
      s.p = c
    else
      s.p = 0
    end
    s.c = 0
  end
  held[key] = s
  return s
end

local answers = {}
local k, a = 0, 1
while a <= #ARGV do
  local hits = tonumber(ARGV[a])
  a = a + 1
  local refused, wait = -1, 0
  for i = 0, hits - 1 do
    local limit, window = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    a = a + 2
    k = k + 1
    if refused < 0 then
      local s = state(KEYS[k], window)
      local elapsed = now - s.index * window
      if s.p * (window - elapsed) / window + s.c + 1 <= limit then
        s.c = s.c + 1
        s.counted = true
      else
        refused = i
        if s.c + 1 > limit then
          -- This window alone is full: wait for the next, then until this one weighs less.
          wait = window - elapsed + window * (1 - (limit - 1) / s.c)
        else
          wait = window - elapsed - window * (limit - 1 - s.c) / s.p
        end
        wait = math.max(1, math.ceil(wait))
      end
    end
  end
  answers[#answers + 1] = refused
  answers[#answers + 1] = wait
end

for key, s in pairs(held) do
  if s.counted then
    if s.moved then
      redis.call('HSET', key, 'w', s.index, 'c', s.c, 'p', s.p)
      redis.call('PEXPIRE', key, (s.index + 2) * s.window - now)
    else
      redis.call('HSET', key, 'c', s.c)
    end
  end
end
return answers
