-- pending: claim a place in a requester's pending index.
-- KEYS[1] the index of one (audience, requester): a hash from
-- "procedure\ndigest" to "id expires_at". ARGV[2] the field, ARGV[3] the
-- new record's id, ARGV[4] its expires_at (µs), ARGV[5] the cap,
-- ARGV[6..] ids the caller found no longer pending.
-- Replies {'ok'}, {'exists', id} for a live entry of the same call, or
-- {'full', {ids}} with the live entries when the cap is reached.
--
-- The index only serves deduplication and the cap; no decision on a record
-- depends on it. Entries past their expiry, and those the caller proved
-- stale, are dropped here. A retried claim finds its own id ('exists').
local now = now_us()
local drop = {}
for i = 6, #ARGV do
  drop[ARGV[i]] = true
end
local live = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local sp = string.find(value, ' ', 1, true)
  local id, expires = value, nil
  if sp then
    id, expires = string.sub(value, 1, sp - 1), tonumber(string.sub(value, sp + 1))
  end
  if not expires or expires <= now or drop[id] then -- expired, stale, or unreadable
    redis.call('HDEL', KEYS[1], field)
  elseif field == ARGV[2] then
    return {'exists', id}
  else
    live[#live + 1] = id
  end
end
if #live >= tonumber(ARGV[5]) then
  return {'full', live}
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. ' ' .. ARGV[4])
local ttl = ttl_ms(tonumber(ARGV[4]) - now)
if redis.call('PTTL', KEYS[1]) < tonumber(ttl) then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {'ok'}
