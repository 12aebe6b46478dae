#!lua
-- Buys of one bucket of a product's stock, in one atomic step, each decided as if it ran alone
-- in the order given. KEYS[1] = the bucket's sale hash, KEYS[2] = its buyers hash, KEYS[3] = its
-- outbox stream, KEYS[4] = this call's replay key, named afresh for every call, and, only when a
-- buy of the call has an idempotency key, KEYS[5] = the bucket's hash of orders kept by buyer
-- and key (all under the bucket's hash tag, so they live on one shard). ARGV = four values per buy:
-- user id, units, now (Unix ms), the encoded order; five with KEYS[5], the fifth the buy's field
-- in it (`user:key`, or empty for a buy without a key); then, last, the most entries the outbox
-- may hold.
-- Returns one text, per buy a line with its code and a line with its units left: 0 taken (and
-- the order appended to the outbox, in the same step, so it cannot be lost between gate and
-- queue), -1 not loaded, -2 not started, -3 ended, -4 per-user limit reached, -5 not enough
-- stock, -6 paused by an operator, -7 the idempotency key was used for another quantity, -8 the
-- outbox is full (the database or the worker is behind: nothing taken, try again shortly); or 1
-- and the order that buy made, for a retry of a buy this key made: nothing taken. An encoded
-- order is JSON on one line. Text, because a client reads one string far faster than a list.
--
-- Every redis.call has a fixed cost (its arguments copied, the command looked up, its reply
-- turned into Lua values), so what the buys need to know is read with one call for the whole
-- batch and what they change is written with one call; only the outbox takes a call per order,
-- one stream entry each.
local per = #KEYS == 5 and 5 or 4
local bound = tonumber(ARGV[#ARGV])
if #ARGV == 1 or (#ARGV - 1) % per ~= 0 or not bound then
  return redis.error_reply(
    'reserve: four arguments per buy, five with idempotency keys, then the outbox bound')
end
-- A call the client sent again (a cluster connection re-sends a script whose reply timed out)
-- answers as its first run did, instead of taking the stock twice. The answers of a call that
-- took stock (or answered a retry) are kept for a minute: re-sends come within seconds. Every
-- call that answers with an order writes, so that a WAIT after it on the same connection covers
-- the writes the answer rests on, whichever connection made them (src/gate/redis/replicas.rs).
local replay = redis.call('GET', KEYS[4])
if replay then
  redis.call('PEXPIRE', KEYS[4], 60000)
  return replay
end
local buys = (#ARGV - 1) / per
local answers = {}
local sale = redis.call('HMGET', KEYS[1], 'remaining', 'start', 'end', 'limit', 'paused')
if not sale[1] then
  for i = 1, buys do
    answers[2 * i - 1], answers[2 * i] = '-1', '0'
  end
  return table.concat(answers, '\n')
end
local remaining = tonumber(sale[1])
local start, stop, limit = tonumber(sale[2]), tonumber(sale[3]), tonumber(sale[4])
-- A product loaded before pausing existed has no `paused` field: not paused.
local paused = sale[5] == '1'
local users = {}
for i = 0, buys - 1 do
  users[i + 1] = ARGV[per * i + 1]
end
local stored = redis.call('HMGET', KEYS[2], unpack(users))
-- Orders sold and not in the database yet (relayed ones stay until stored): per product, so the
-- count is in this same atomic step.
local backlog = redis.call('XLEN', KEYS[3])
-- A key names its order for a day (IdempotencyKey::LIFETIME_MS) from when the order was made.
local lifetime = 86400000
-- Only a call with keys looks them up: the kept orders of its buys with a key, each
-- `made at:units:encoded order`, the keys it keeps, and `retried`, which for a buy with `field`
-- of `units` at `now` gives the order its key made, or false when that was for another
-- quantity; nil when the key names no live order.
local kept, keeps, retried
if per == 5 then
  kept, keeps = {}, {}
  local fields = {}
  for i = 0, buys - 1 do
    local field = ARGV[5 * i + 5]
    if field ~= '' then
      fields[#fields + 1] = field
    end
  end
  if #fields > 0 then
    local values = redis.call('HMGET', KEYS[5], unpack(fields))
    for j = 1, #fields do
      if values[j] then
        kept[fields[j]] = values[j]
      end
    end
  end
  retried = function(field, units, now)
    local value = kept[field]
    if not value then
      return nil
    end
    local made, had, first = string.match(value, '^(%d+):(%d+):(.*)$')
    if not made or now - tonumber(made) >= lifetime then
      return nil
    end
    return tonumber(had) == units and first
  end
end
-- The numbers of a call's texts, each converted once: most buys of a call share their units and
-- their millisecond.
local numbers = {}
local function number(text)
  local n = numbers[text]
  if not n then
    n = tonumber(text)
    numbers[text] = n
  end
  return n
end
local held, bought, sold, replayed = {}, {}, 0, false
for i = 0, buys - 1 do
  local at = per * i
  local user, order = users[i + 1], ARGV[at + 4]
  local units, now = number(ARGV[at + 2]), number(ARGV[at + 3])
  local code, first = '0', nil
  if kept then
    first = retried(ARGV[at + 5], units, now)
  end
  if first then
    -- A retry: answered with the first buy's order, whatever the window and the stock say now.
    code = '1'
    replayed = true
  elseif first == false then
    code = '-7'
  elseif now < start then
    code = '-2'
  elseif now >= stop then
    code = '-3'
  elseif paused then
    code = '-6'
  else
    -- What the buyer held before this batch, or after their earlier buys in it.
    local has = held[user] or number(stored[i + 1] or '0')
    held[user] = has
    if has + units > limit then
      code = '-4'
    -- `<`, not `<=`: the last unit sells.
    elseif remaining < units then
      code = '-5'
    elseif backlog >= bound then
      code = '-8'
    else
      bought[user] = true
      held[user] = has + units
      remaining = remaining - units
      sold = sold + units
      redis.call('XADD', KEYS[3], '*', 'order', order)
      backlog = backlog + 1
      if kept and ARGV[at + 5] ~= '' then
        -- Kept in the same step: a later buy of this call with the key replays this one.
        local field = ARGV[at + 5]
        kept[field] = ARGV[at + 3] .. ':' .. ARGV[at + 2] .. ':' .. order
        keeps[#keeps + 1] = field
        keeps[#keeps + 1] = kept[field]
      end
    end
  end
  answers[2 * i + 1], answers[2 * i + 2] = code, first or string.format('%d', remaining)
end
answers = table.concat(answers, '\n')
if sold > 0 then
  local holdings = {}
  for user in pairs(bought) do
    holdings[#holdings + 1] = user
    -- As text already: redis.call prints a Lua number with '%.17g', a slower path than '%d'.
    holdings[#holdings + 1] = string.format('%d', held[user])
  end
  redis.call('HSET', KEYS[2], unpack(holdings))
  redis.call('HINCRBY', KEYS[1], 'remaining', -sold)
  if keeps and #keeps > 0 then
    -- Bounded: the whole hash goes a day after its last order, when all it holds has expired.
    redis.call('HSET', KEYS[5], unpack(keeps))
    redis.call('PEXPIRE', KEYS[5], lifetime)
  end
end
if sold > 0 or replayed then
  redis.call('SET', KEYS[4], answers, 'PX', 60000)
end
return answers
