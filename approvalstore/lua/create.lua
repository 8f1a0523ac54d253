-- create: store a new pending record.
-- KEYS[1] the record. ARGV[2] expires_in (µs), ARGV[3] retention (µs),
-- ARGV[4] requested_by, ARGV[5] digest, ARGV[6..] the request's field/value
-- pairs. Replies {'ok', requested_at, expires_at} or {'taken'}.
--
-- A client retrying after a lost reply finds its own record and gets the
-- same answer; another request with the same id is refused.
local cur = redis.call('HMGET', KEYS[1], 'status', 'requested_by', 'digest', 'requested_at', 'expires_at')
if cur[1] then
  if cur[2] == ARGV[4] and cur[3] == ARGV[5] then
    return {'ok', cur[4], cur[5]}
  end
  return {'taken'}
end
local now = now_us()
local expires = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'pending', 'requested_at', int(now), 'expires_at', int(expires), unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], ttl_ms(tonumber(ARGV[2]) + tonumber(ARGV[3])))
return {'ok', int(now), int(expires)}
