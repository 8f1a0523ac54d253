-- complete: store the result of the execution holding the key.
-- KEYS[1] the record. ARGV[2] execution id, ARGV[3] the result's
-- execution, ARGV[4] code, ARGV[5] envelope, ARGV[6] sealed response ('':
-- none), ARGV[7] key id, ARGV[8] '1' for a late result.
-- Replies {'ok'}, also for a done record of the holder (a repeat), or
-- {'not_held'}.
local r = read('state', 'expires_at', 'lease_until', 'exec', 'retention')
local now = now_us()
local s = state(r, now)
if not s or r.exec ~= ARGV[2] then
  return {'not_held'}
end
if s == 'done' then
  return {'ok'}
end
local expires = now + tonumber(r.retention)
redis.call('HSET', KEYS[1], 'state', 'done', 'reconcile_of', '', 'done_at', int(now), 'expires_at', int(expires),
  'result_exec', ARGV[3], 'result_code', ARGV[4], 'envelope', ARGV[5], 'sealed', ARGV[6], 'key_id', ARGV[7], 'late', ARGV[8])
expire(expires, now)
return {'ok'}
