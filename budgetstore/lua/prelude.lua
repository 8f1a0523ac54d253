-- Shared by every script of the Redis budget store; prepended to each.
-- A budget key's reservations are two keys under one hash tag (see
-- redis.go): KEYS[1] a sorted set of execution ids scored by the time of
-- their reservation, KEYS[2] a hash of execution id → amount ("!" appended
-- for an overdraft) with the running sum of the reservations in field
-- "#total".
--
-- ARGV[1] is always the clock offset in microseconds: zero outside tests,
-- which may also pin the clock ('=' and unix microseconds) to check the
-- window's edges to the microsecond. Every decision uses Redis TIME, never
-- an instance's clock.
local function now_us()
  if string.sub(ARGV[1], 1, 1) == '=' then
    return tonumber(string.sub(ARGV[1], 2))
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end

-- int prints an integer in decimal. Lua numbers are doubles, exact up to
-- 2^53 (unix microseconds and the amounts the store accepts fit), but
-- tostring prints large ones in exponent form.
local function int(x)
  return string.format('%.0f', x)
end

-- parse returns the amount of a stored reservation and whether it is an
-- overdraft.
local function parse(v)
  local amount, over = string.match(v, '^(%d+)(!?)$')
  return tonumber(amount), over == '!'
end

-- amounts returns the stored values of ids, in their order (false where
-- none), asking in slices: unpack has a bounded stack.
local function amounts(ids)
  local out = {}
  for i = 1, #ids, 1000 do
    local part = redis.call('HMGET', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #part do
      out[#out + 1] = part[j]
    end
  end
  return out
end

-- trim removes the reservations that stopped counting at now (their age
-- is window or more: a reservation at t counts while now < t + window),
-- keeps "#total" their sum, and returns it.
local function trim(now, window)
  local total = tonumber(redis.call('HGET', KEYS[2], '#total') or '0')
  local edge = int(now - window)
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', edge)
  if #old == 0 then
    return total
  end
  local stored = amounts(old)
  for i = 1, #old do
    if stored[i] then
      total = total - parse(stored[i])
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', edge)
  for i = 1, #old, 1000 do
    redis.call('HDEL', KEYS[2], unpack(old, i, math.min(i + 999, #old)))
  end
  if redis.call('ZCARD', KEYS[1]) == 0 then
    total = 0
  end
  redis.call('HSET', KEYS[2], '#total', int(total))
  return total
end
