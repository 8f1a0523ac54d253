-- claim: the first step of every call with a key.
-- KEYS[1] the record. ARGV[2] digest, ARGV[3] execution id, ARGV[4] lease
-- (µs), ARGV[5] '1' for a write-like claim, ARGV[6] retention (µs),
-- ARGV[7] '1' to take an in-doubt record over to reconcile it.
-- Replies {'acquired'}, {'reconcile', held_by}, {'in_flight', holder},
-- {'key_reused'}, {'in_doubt', holder}, or {'done', holder, result
-- execution, code, envelope, sealed, key id, late}.
--
-- One read of everything a claim may answer with; every check comes
-- before the single write, in the order of the store contract: gone,
-- another digest, done, in doubt, in flight. A repeat by the holder
-- answers as the first claim did: a client may retry after a lost reply.
local r = read('state', 'expires_at', 'lease_until', 'digest', 'exec', 'reconcile_of',
  'result_exec', 'result_code', 'envelope', 'sealed', 'key_id', 'late')
local now = now_us()
local s = state(r, now)

local function acquire(reconcile_of)
  local lease = now + tonumber(ARGV[4])
  local expires = lease
  if ARGV[5] == '1' then
    expires = lease + tonumber(ARGV[6])
  end
  if r.state then -- a record gone, or in doubt: start afresh
    redis.call('DEL', KEYS[1])
  end
  redis.call('HSET', KEYS[1], 'state', 'in_flight', 'digest', ARGV[2], 'exec', ARGV[3], 'reconcile_of', reconcile_of,
    'write_like', ARGV[5], 'claimed_at', int(now), 'lease_until', int(lease), 'retention', ARGV[6], 'expires_at', int(expires))
  expire(expires, now)
end

if not s then
  acquire('')
  return {'acquired'}
end
if r.digest ~= ARGV[2] then
  return {'key_reused'}
end
if s == 'done' then
  return {'done', r.exec, r.result_exec or '', r.result_code or '', r.envelope or '', r.sealed or '', r.key_id or '', r.late or '0'}
end
if s == 'in_doubt' then
  if ARGV[7] == '1' then
    acquire(r.exec)
    return {'reconcile', r.exec}
  end
  return {'in_doubt', r.exec}
end
if r.exec ~= ARGV[3] then
  return {'in_flight', r.exec}
end
if r.reconcile_of and r.reconcile_of ~= '' then
  return {'reconcile', r.reconcile_of}
end
return {'acquired'}
