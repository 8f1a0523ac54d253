-- doubt: the execution holding the key may have had an effect and has no
-- result to store.
-- KEYS as in the prelude. ARGV[3] execution id.
-- Replies {'ok'}, also when the holder's record is in doubt already or
-- done, or {'not_held'}.
local r = read('state', 'expires_at', 'lease_until', 'exec', 'retention', 'reconcile_of')
local now = now_us()
local s = state(r, now)
if not s or r.exec ~= ARGV[3] then
  return {'not_held'}
end
if r.state == 'in_flight' then -- its lease over or not
  local expires = now + tonumber(r.retention)
  -- A reconciler that could not tell leaves the key in doubt about the
  -- execution it reconciled, which may have run; it ran nothing.
  local exec = r.exec
  if r.reconcile_of and r.reconcile_of ~= '' then
    exec = r.reconcile_of
  end
  redis.call('HSET', KEYS[1], 'state', 'in_doubt', 'exec', exec, 'reconcile_of', '', 'done_at', int(now), 'expires_at', int(expires))
  expire(expires, now)
  index(expires, false, now)
end
return {'ok'}
