-- Buys of one product, in one atomic step, each decided as if it ran alone in the order given.
-- KEYS[1] = the product's sale hash, KEYS[2] = its buyers hash, KEYS[3] = its outbox stream,
-- KEYS[4] = its recently taken order ids (all under the product's hash tag, so they live on one
-- shard). ARGV = five values per buy: user id, units, now (Unix ms), the encoded order, its id.
-- Returns {code, remaining} per buy, one flat list: 0 taken (and the order appended to the
-- outbox, in the same step, so it cannot be lost between gate and queue), -1 not loaded, -2 not
-- started, -3 ended, -4 per-user limit reached, -5 not enough stock.
--
-- Every redis.call has a fixed cost (its arguments copied, the command looked up, its reply
-- turned into Lua values), so what the buys need to know is read with one call for the whole
-- batch and what they change is written with one call; only the outbox takes a call per order,
-- one stream entry each.
if #ARGV == 0 or #ARGV % 5 ~= 0 then
  return redis.error_reply('reserve: five arguments per buy')
end
local buys = #ARGV / 5
local answers = {}
local sale = redis.call('HMGET', KEYS[1], 'remaining', 'start', 'end', 'limit')
if not sale[1] then
  for i = 1, buys do
    answers[2 * i - 1], answers[2 * i] = -1, 0
  end
  return answers
end
local remaining = tonumber(sale[1])
local start, stop, limit = tonumber(sale[2]), tonumber(sale[3]), tonumber(sale[4])
-- A repeat of a buy already taken (a cluster client re-sends a script whose reply timed out)
-- answers as the first run did, instead of taking the stock twice. A minute of ids is kept:
-- re-sends come within seconds, and a longer memory costs a busy product megabytes.
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', tonumber(ARGV[3]) - 60000)
local users, ids = {}, {}
for i = 0, buys - 1 do
  users[i + 1], ids[i + 1] = ARGV[5 * i + 1], ARGV[5 * i + 5]
end
local known = redis.call('ZMSCORE', KEYS[4], unpack(ids))
local stored = redis.call('HMGET', KEYS[2], unpack(users))
local held, bought, taken_here, newly_taken, sold = {}, {}, {}, {}, 0
for i = 0, buys - 1 do
  local user, id, order = users[i + 1], ids[i + 1], ARGV[5 * i + 4]
  -- Numbers go back to Redis as the strings they came as: a Lua number is formatted with
  -- printf on its way into a command, and Redis parses it again.
  local now_arg = ARGV[5 * i + 3]
  local units, now = tonumber(ARGV[5 * i + 2]), tonumber(now_arg)
  local code = 0
  if taken_here[id] or known[i + 1] then
    code = 0
  elseif now < start then
    code = -2
  elseif now >= stop then
    code = -3
  else
    -- What the buyer held before this batch, or after their earlier buys in it.
    local has = held[user] or tonumber(stored[i + 1] or '0')
    held[user] = has
    if has + units > limit then
      code = -4
    -- `<`, not `<=`: the last unit sells.
    elseif remaining < units then
      code = -5
    else
      bought[user] = true
      held[user] = has + units
      remaining = remaining - units
      sold = sold + units
      taken_here[id] = true
      newly_taken[#newly_taken + 1] = now_arg
      newly_taken[#newly_taken + 1] = id
      redis.call('XADD', KEYS[3], '*', 'order', order)
    end
  end
  answers[2 * i + 1], answers[2 * i + 2] = code, remaining
end
if sold > 0 then
  local holdings = {}
  for user in pairs(bought) do
    holdings[#holdings + 1] = user
    holdings[#holdings + 1] = held[user]
  end
  redis.call('HSET', KEYS[2], unpack(holdings))
  redis.call('ZADD', KEYS[4], unpack(newly_taken))
  redis.call('HINCRBY', KEYS[1], 'remaining', -sold)
end
return answers
