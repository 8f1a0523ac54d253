-- release: the holder gives the key back; nothing ran.
-- KEYS as in the prelude. ARGV[3] execution id.
-- Replies {'ok'} always: for any record not held by the execution, or
-- done, it changes nothing.
local r = read('state', 'expires_at', 'lease_until', 'exec')
local now = now_us()
local s = state(r, now)
if s and s ~= 'done' and r.exec == ARGV[3] then
  redis.call('DEL', KEYS[1])
  unindex()
end
return {'ok'}
