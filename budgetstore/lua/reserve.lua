-- reserve: stage 2e of a call with a budget. Unlike the other scripts it
-- does without the prelude, and defines no function: it runs on every
-- call, and Lua builds a script's functions again on each run.
-- KEYS[1] the budget key (see prelude.lua). ARGV[1] the clock offset (µs,
-- or '=' and a pinned time), ARGV[2] execution id, ARGV[3] amount,
-- ARGV[4] limit, ARGV[5] window (µs), ARGV[6] '1' to reserve past the
-- limit (an approved overdraft).
-- Replies {reserved 1/0, overdraft 1/0, spent, retry after (µs; 0 when
-- reserved, or when the amount never fits)}.
--
-- Trim, sum, check, add: one step. A repeat by an execution that holds a
-- reservation within the window answers as the first did, adding nothing
-- (only a request that may overdraw can have made an overdraft, so only
-- its repeat looks for one).
local now
if string.sub(ARGV[1], 1, 1) == '=' then
  now = tonumber(string.sub(ARGV[1], 2))
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
end
local window = tonumber(ARGV[5])
local live = now - window -- a reservation at t counts while t > live
local mine = ARGV[2] .. '|' .. ARGV[3]
local overdraws = ARGV[6] == '1'
local found
if overdraws then
  found = redis.call('ZMSCORE', KEYS[1], '#', mine, mine .. '!')
else
  found = redis.call('ZMSCORE', KEYS[1], '#', mine)
end
local total = -(tonumber(found[1]) or 0)
-- Trim what aged out of the window, and take it off the sum. Lua numbers
-- are doubles, exact up to 2^53: times in µs and the amounts the store
-- accepts fit, and Redis writes such a number without an exponent.
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', live)
local trimmed = #old > 0
if trimmed then
  for i = 1, #old do
    total = total - tonumber(string.match(old[i], '|(%d+)!?$'))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', live)
  if total < 0 then
    total = 0
  end
end
local held = found[2] and tonumber(found[2]) > live
local heldOver = found[3] and tonumber(found[3]) > live
local amount = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local over = total + amount > limit
if held or heldOver or (over and not overdraws) then
  if trimmed then
    redis.call('ZADD', KEYS[1], -total, '#')
  end
  if held or heldOver then
    return {1, heldOver and 1 or 0, total, 0}
  end
  if amount > limit then
    return {0, 0, total, 0}
  end
  -- Oldest first: when enough has aged out for the amount to fit.
  local need = total + amount - limit
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES')
  for i = 1, #members, 2 do
    need = need - tonumber(string.match(members[i], '|(%d+)!?$'))
    if need <= 0 then
      return {0, 0, total, tonumber(members[i + 1]) + window - now}
    end
  end
  return {0, 0, total, 0}
end
if over then
  mine = mine .. '!'
end
redis.call('ZADD', KEYS[1], now, mine, -(total + amount), '#')
-- The key's TTL collects garbage only: it ends at least a second after the
-- newest reservation stops counting. It is set again only once half of it
-- has passed (a TTL is Redis's clock: tests' offsets never shorten it).
local ttl = math.ceil(window / 1000) + 1000
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
return {1, over and 1 or 0, total + amount, 0}
