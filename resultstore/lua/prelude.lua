-- Shared by every script of the Redis result store; prepended to each.
-- KEYS[1] is a key's record, one hash (see redis.go for its fields);
-- KEYS[2] and KEYS[3] are its owner's index, in the same hash tag: a
-- sorted set of the owner's record ids scored by when each record is gone
-- (its expires_at), and a hash of the sizes of its done records by id,
-- with their sum under 'total'.
--
-- ARGV[1] is always the clock offset in microseconds: zero outside tests;
-- ARGV[2] the record's id (its key, idk_…). Every decision uses Redis
-- TIME, never an instance's clock.
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

-- ttl_ms is the TTL of a key that must outlive expires by a second: a TTL
-- only collects garbage and must never delete a record (or an index entry)
-- before the scripts would call it gone.
local function ttl_ms(expires, now)
  return int(math.ceil((expires - now) / 1000) + 1000)
end

-- expire sets the record's TTL to its end.
local function expire(expires, now)
  redis.call('PEXPIRE', KEYS[1], ttl_ms(expires, now))
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

-- The owner's index.

-- extend makes key live at least until expires (and an hour beyond, so
-- that most writes find it long enough and leave it): an index key must
-- outlive every record it counts, and carry a TTL even under noeviction.
local function extend(key, expires, now)
  local need = tonumber(ttl_ms(expires, now))
  local ttl = redis.call('PTTL', key)
  if ttl < need then
    redis.call('PEXPIRE', key, int(need + 3600000))
  end
end

-- forget_sizes takes the sizes of ids out of the index's sum.
local function forget_sizes(ids)
  local sizes = redis.call('HMGET', KEYS[3], unpack(ids))
  local freed = 0
  for _, s in ipairs(sizes) do
    if s then
      freed = freed + tonumber(s)
    end
  end
  if freed > 0 then
    redis.call('HDEL', KEYS[3], unpack(ids))
    redis.call('HINCRBY', KEYS[3], 'total', -freed)
  end
end

-- prune drops up to 256 gone records from the index (a bounded step per
-- claim, which adds at most one): records gone and not yet dropped are
-- never counted (see usage), but their sizes may be until they are, which
-- only errs toward refusing.
local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', int(now), 'LIMIT', 0, 256)
  if #gone > 0 then
    forget_sizes(gone)
    redis.call('ZREM', KEYS[2], unpack(gone))
  end
end

-- usage is what the owner keeps as of now: its live records, and the sum
-- of the sizes of its done ones.
local function usage(now)
  return redis.call('ZCOUNT', KEYS[2], '(' .. int(now), '+inf'), tonumber(redis.call('HGET', KEYS[3], 'total') or '0')
end

-- index records that this record is gone at expires, and, once it is
-- done, its size. A record is indexed without a size until it is done,
-- and is done at most once in its life (a record replaced by a new claim
-- has its size forgotten first: see forget_sizes).
local function index(expires, size, now)
  redis.call('ZADD', KEYS[2], int(expires), ARGV[2])
  extend(KEYS[2], expires, now)
  if size then
    redis.call('HSET', KEYS[3], ARGV[2], size)
    redis.call('HINCRBY', KEYS[3], 'total', size)
    extend(KEYS[3], expires, now)
  end
end

-- unindex removes this record (which has no size: it is not done) from
-- the index. The index keeps its TTL: it only collects garbage.
local function unindex()
  redis.call('ZREM', KEYS[2], ARGV[2])
end
