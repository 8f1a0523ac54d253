-- complete: store the result of the execution holding the key.
-- KEYS as in the prelude. ARGV[3] execution id, ARGV[4] the result's
-- execution, ARGV[5] code, ARGV[6] envelope, ARGV[7] sealed response ('':
-- none), ARGV[8] key id, ARGV[9] '1' for a late result, ARGV[10] the
-- result's size, which counts against the owner's byte quota from now.
-- Replies {'ok'}, also for a done record of the holder (a repeat), or
-- {'not_held'}.
local r = read('state', 'expires_at', 'lease_until', 'exec', 'retention')
local now = now_us()
local s = state(r, now)
if not s or r.exec ~= ARGV[3] then
  return {'not_held'}
end
if s == 'done' then
  return {'ok'}
end
local expires = now + tonumber(r.retention)
redis.call('HSET', KEYS[1], 'state', 'done', 'reconcile_of', '', 'done_at', int(now), 'expires_at', int(expires),
  'result_exec', ARGV[4], 'result_code', ARGV[5], 'envelope', ARGV[6], 'sealed', ARGV[7], 'key_id', ARGV[8], 'late', ARGV[9])
expire(expires, now)
index(expires, tonumber(ARGV[10]), now)
return {'ok'}
