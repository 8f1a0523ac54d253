-- Shared by every script of the Redis result store; prepended to each.
-- A key's record is one hash at KEYS[1] (see redis.go for its fields).
--
-- ARGV[1] is always the clock offset in microseconds: zero outside tests.
-- Every decision uses Redis TIME, never an instance's clock.
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

-- expire sets the key's TTL to the record's end, at least one second
-- further: a TTL only collects garbage and must never delete a record
-- before the scripts would call it gone.
local function expire(expires, now)
  redis.call('PEXPIRE', KEYS[1], int(math.ceil((expires - now) / 1000) + 1000))
end

-- read returns the named fields of the record as a table by name, false
-- where unset.
local function read(...)
  local names = {...}
  local values = redis.call('HMGET', KEYS[1], unpack(names))
  local r = {}
  for i, name in ipairs(names) do
    r[name] = values[i]
  end
  return r
end

-- state is the record's state as of now, or nil when it is gone: past its
-- end (expires_at: a read's claim ends with its lease, a write-like one
-- and a done or in-doubt record a retention later), and a write-like claim
-- past its lease is in doubt. r must hold state, expires_at and
-- lease_until.
local function state(r, now)
  if not r.state or now >= tonumber(r.expires_at) then
    return nil
  end
  if r.state == 'in_flight' and now >= tonumber(r.lease_until) then
    return 'in_doubt'
  end
  return r.state
end
