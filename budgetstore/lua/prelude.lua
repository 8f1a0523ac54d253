-- Shared by the scripts of the Redis budget store but reserve.lua (which
-- repeats what it needs of it: it runs on every call); prepended to each.
-- A budget key is one sorted set, KEYS[1] (see redis.go): each
-- reservation a member "<execution id>|<amount>" ("!" appended for an
-- overdraft) scored by its time, unix microseconds, and the member "#"
-- scored by minus the sum of the reservations (never positive, so it is
-- never in a range of times).
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

-- parse returns the amount of a reservation's member and whether it is an
-- overdraft.
local function parse(member)
  local amount, over = string.match(member, '|(%d+)(!?)$')
  return tonumber(amount), over == '!'
end
