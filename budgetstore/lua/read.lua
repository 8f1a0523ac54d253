-- read: what the reservations within a window add up to. Changes nothing.
-- KEYS[1] the budget key. ARGV[2] window (µs).
-- Replies {spent, reservations, overdrafts, overdrawn}.
local now = now_us()
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now - tonumber(ARGV[2])), '+inf')
local spent, overdrafts, overdrawn = 0, 0, 0
for i = 1, #members do
  local amount, over = parse(members[i])
  spent = spent + amount
  if over then
    overdrafts = overdrafts + 1
    overdrawn = overdrawn + amount
  end
end
return {int(spent), #members, overdrafts, int(overdrawn)}
