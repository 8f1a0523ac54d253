-- get: the record as of Redis TIME.
-- KEYS as in the prelude (only KEYS[1] is read).
-- Replies {state as of now ('' when gone), the values of the fields
-- recordFields (redis.go) names, in that order}.
local r = read('state', 'expires_at', 'lease_until')
local s = state(r, now_us())
if not s then
  return {''}
end
return {s, redis.call('HMGET', KEYS[1], 'state', 'digest', 'exec', 'reconcile_of', 'write_like', 'claimed_at', 'lease_until',
  'retention', 'done_at', 'expires_at', 'result_exec', 'result_code', 'envelope', 'sealed', 'key_id', 'late')}
