-- A consistent picture of one product for reconciling: KEYS[1] = sale hash, KEYS[2] = outbox
-- stream, KEYS[3] = dead stream. Returns {units left (-1 when not loaded), units in the outbox,
-- orders in the outbox, dead entries}, all read in one atomic step.
local left = redis.call('HGET', KEYS[1], 'remaining')
local units = 0
local entries = redis.call('XRANGE', KEYS[2], '-', '+')
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'qty' then units = units + tonumber(fields[i + 1]) end
  end
end
return {tonumber(left or '-1'), units, #entries, redis.call('XLEN', KEYS[3])}
