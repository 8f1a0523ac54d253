-- release: the holder gives the key back; nothing ran.
-- KEYS[1] the record. ARGV[2] execution id.
-- Replies {'ok'} always: for any record not held by the execution, or
-- done, it changes nothing.
local r = read('state', 'expires_at', 'lease_until', 'exec')
local s = state(r, now_us())
if s and s ~= 'done' and r.exec == ARGV[2] then
  redis.call('DEL', KEYS[1])
end
return {'ok'}
