-- release: give back what one execution reserved, when nothing ran.
-- KEYS[1] the times, KEYS[2] the amounts. ARGV[2] execution id.
-- Replies 'ok', whether or not there was a reservation to release: a
-- repeat, or a release of another execution's, changes nothing.
local held = redis.call('HGET', KEYS[2], ARGV[2])
if not held then
  return 'ok'
end
local amount = parse(held)
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
local total = tonumber(redis.call('HGET', KEYS[2], '#total') or '0') - amount
if redis.call('ZCARD', KEYS[1]) == 0 or total < 0 then
  total = 0
end
redis.call('HSET', KEYS[2], '#total', int(total))
return 'ok'
