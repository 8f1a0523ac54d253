-- reserve: stage 2e of a call with a budget.
-- KEYS[1] the times, KEYS[2] the amounts. ARGV[2] execution id, ARGV[3]
-- amount, ARGV[4] limit, ARGV[5] window (µs), ARGV[6] '1' to reserve past
-- the limit (an approved overdraft).
-- Replies {'reserved', overdraft '1'/'0', spent} or {'refused', spent,
-- retry after (µs, '0' for never)}.
--
-- Trim, sum, check, add: one step. A repeat by an execution that holds a
-- reservation within the window answers as the first did, adding nothing.
local now = now_us()
local window = tonumber(ARGV[5])
local total = trim(now, window)
local held = redis.call('HGET', KEYS[2], ARGV[2])
if held then
  local _, over = parse(held)
  return {'reserved', over and '1' or '0', int(total)}
end
local amount = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local over = total + amount > limit
if over and ARGV[6] ~= '1' then
  if amount > limit then
    return {'refused', int(total), '0'}
  end
  -- Oldest first: when enough has aged out for the amount to fit.
  local need = total + amount - limit
  local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local ids = {}
  for i = 1, #members, 2 do
    ids[#ids + 1] = members[i]
  end
  local stored = amounts(ids)
  for i = 1, #ids do
    if stored[i] then
      need = need - parse(stored[i])
      if need <= 0 then
        return {'refused', int(total), int(tonumber(members[2 * i]) + window - now)}
      end
    end
  end
  return {'refused', int(total), '0'}
end
local stored = ARGV[3]
if over then
  stored = stored .. '!'
end
redis.call('ZADD', KEYS[1], int(now), ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], stored, '#total', int(total + amount))
-- Garbage only: a second after the newest reservation stops counting.
local ttl = int(math.ceil(window / 1000) + 1000)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {'reserved', over and '1' or '0', int(total + amount)}
