-- release: give back what one execution reserved, when nothing ran.
-- KEYS[1] the budget key. ARGV[2] execution id, ARGV[3] its amount.
-- Replies 'ok', whether or not there was a reservation to release: a
-- repeat, or a release of another execution's, changes nothing.
local mine = ARGV[2] .. '|' .. ARGV[3]
if redis.call('ZREM', KEYS[1], mine, mine .. '!') > 0 then
  local total = -(tonumber(redis.call('ZSCORE', KEYS[1], '#')) or 0) - tonumber(ARGV[3])
  if total < 0 then
    total = 0
  end
  redis.call('ZADD', KEYS[1], -total, '#')
end
return 'ok'
