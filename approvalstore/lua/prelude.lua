-- Shared by every script of the Redis approval store; prepended to each,
-- after the record's accessors Go generates from recordFields (see
-- redis_record.go): record(), which reads every field of the record at
-- KEYS[1] in that order (false where unset), and f_<field>, each field's
-- index in what record() returns.
--
-- ARGV[1] is always the clock offset in microseconds: zero outside tests.
-- Every expiry decision uses Redis TIME, never an instance's clock.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end

-- int prints an integer in decimal. Lua numbers are doubles, exact up to
-- 2^53 (unix microseconds fit), but tostring prints large ones in exponent
-- form.
local function int(x)
  return string.format('%.0f', x)
end

-- ttl_ms turns microseconds into milliseconds for PEXPIRE, at least one
-- second: a key's TTL only collects garbage and must never delete it early.
local function ttl_ms(us)
  return int(math.max(math.ceil(us / 1000), 1000))
end


-- read returns the named fields of the record at KEYS[1] as a table by
-- name, false where unset: for scripts that need a few fields, not the
-- whole record.
local function read(...)
  local names = {...}
  local values = redis.call('HMGET', KEYS[1], unpack(names))
  local r = {}
  for i, name in ipairs(names) do
    r[name] = values[i]
  end
  return r
end
