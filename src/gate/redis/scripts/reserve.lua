-- Buys of one product, in one atomic step, each decided as if it ran alone in the order given.
-- KEYS[1] = the product's sale hash, KEYS[2] = its buyers hash, KEYS[3] = its outbox stream,
-- KEYS[4] = this call's replay key, named afresh for every call (all under the product's hash
-- tag, so they live on one shard). ARGV = four values per buy: user id, units, now (Unix ms),
-- the encoded order.
-- Returns {code, remaining} per buy, one flat list: 0 taken (and the order appended to the
-- outbox, in the same step, so it cannot be lost between gate and queue), -1 not loaded, -2 not
-- started, -3 ended, -4 per-user limit reached, -5 not enough stock, -6 paused by an operator.
--
-- Every redis.call has a fixed cost (its arguments copied, the command looked up, its reply
-- turned into Lua values), so what the buys need to know is read with one call for the whole
-- batch and what they change is written with one call; only the outbox takes a call per order,
-- one stream entry each.
if #ARGV == 0 or #ARGV % 4 ~= 0 then
  return redis.error_reply('reserve: four arguments per buy')
end
-- A call the client sent again (a cluster connection re-sends a script whose reply timed out)
-- answers as its first run did, instead of taking the stock twice. The answers of a call that
-- took stock are kept for a minute: re-sends come within seconds.
local replay = redis.call('GET', KEYS[4])
if replay then
  return cmsgpack.unpack(replay)
end
local buys = #ARGV / 4
local answers = {}
local sale = redis.call('HMGET', KEYS[1], 'remaining', 'start', 'end', 'limit', 'paused')
if not sale[1] then
  for i = 1, buys do
    answers[2 * i - 1], answers[2 * i] = -1, 0
  end
  return answers
end
local remaining = tonumber(sale[1])
local start, stop, limit = tonumber(sale[2]), tonumber(sale[3]), tonumber(sale[4])
-- A product loaded before pausing existed has no `paused` field: not paused.
local paused = sale[5] == '1'
local users = {}
for i = 0, buys - 1 do
  users[i + 1] = ARGV[4 * i + 1]
end
local stored = redis.call('HMGET', KEYS[2], unpack(users))
local held, bought, sold = {}, {}, 0
for i = 0, buys - 1 do
  local user, order = users[i + 1], ARGV[4 * i + 4]
  local units, now = tonumber(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3])
  local code = 0
  if now < start then
    code = -2
  elseif now >= stop then
    code = -3
  elseif paused then
    code = -6
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
  redis.call('HINCRBY', KEYS[1], 'remaining', -sold)
  redis.call('SET', KEYS[4], cmsgpack.pack(answers), 'PX', 60000)
end
return answers
