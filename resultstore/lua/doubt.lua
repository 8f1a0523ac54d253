-- doubt: the execution holding the key may have had an effect and has no
-- result to store.
-- KEYS[1] the record. ARGV[2] execution id.
-- Replies {'ok'}, also when the holder's record is in doubt already or
-- done, or {'not_held'}.
local r = read('state', 'expires_at', 'lease_until', 'exec', 'retention')
local now = now_us()
local s = state(r, now)
if not s or r.exec ~= ARGV[2] then
  return {'not_held'}
end
if r.state == 'in_flight' then -- its lease over or not
  local expires = now + tonumber(r.retention)
  redis.call('HSET', KEYS[1], 'state', 'in_doubt', 'reconcile_of', '', 'done_at', int(now), 'expires_at', int(expires))
  expire(expires, now)
end
return {'ok'}
