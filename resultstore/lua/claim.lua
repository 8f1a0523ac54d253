-- claim: the first step of every call with a key.
-- KEYS as in the prelude. ARGV[3] digest, ARGV[4] execution id, ARGV[5]
-- lease (µs), ARGV[6] '1' for a write-like claim, ARGV[7] retention (µs),
-- ARGV[8] '1' to take an in-doubt record over to reconcile it, ARGV[9]
-- and ARGV[10] the owner's quota of records and of bytes ('0': none).
-- Replies {'acquired'}, {'reconcile', held_by}, {'in_flight', holder},
-- {'key_reused'}, {'in_doubt', holder}, {'quota_exceeded'}, or {'done',
-- holder, result execution, code, envelope, sealed, key id, late}.
--
-- One read of everything a claim may answer with; every check comes
-- before the writes, in the order of the store contract: gone (and the
-- owner's quota), another digest, done, in doubt, in flight. A repeat by
-- the holder answers as the first claim did: a client may retry after a
-- lost reply.
local r = read('state', 'expires_at', 'lease_until', 'digest', 'exec', 'reconcile_of',
  'result_exec', 'result_code', 'envelope', 'sealed', 'key_id', 'late')
local now = now_us()
local s = state(r, now)

local function acquire(reconcile_of)
  local lease = now + tonumber(ARGV[5])
  local expires = lease
  if ARGV[6] == '1' then
    expires = lease + tonumber(ARGV[7])
  end
  if r.state then -- a record gone, or in doubt: start afresh
    redis.call('DEL', KEYS[1])
    forget_sizes({ARGV[2]})
  end
  redis.call('HSET', KEYS[1], 'state', 'in_flight', 'digest', ARGV[3], 'exec', ARGV[4], 'reconcile_of', reconcile_of,
    'write_like', ARGV[6], 'claimed_at', int(now), 'lease_until', int(lease), 'retention', ARGV[7], 'expires_at', int(expires))
  expire(expires, now)
  index(expires, false, now)
end

if not s then
  prune(now)
  local records, bytes = usage(now)
  local max_records, max_bytes = tonumber(ARGV[9]), tonumber(ARGV[10])
  if (max_records > 0 and records >= max_records) or (max_bytes > 0 and bytes >= max_bytes) then
    return {'quota_exceeded'}
  end
  acquire('')
  return {'acquired'}
end
if r.digest ~= ARGV[3] then
  return {'key_reused'}
end
if s == 'done' then
  return {'done', r.exec, r.result_exec or '', r.result_code or '', r.envelope or '', r.sealed or '', r.key_id or '', r.late or '0'}
end
if s == 'in_doubt' then
  if ARGV[8] == '1' then
    acquire(r.exec)
    return {'reconcile', r.exec}
  end
  return {'in_doubt', r.exec}
end
if r.exec ~= ARGV[4] then
  return {'in_flight', r.exec}
end
if r.reconcile_of and r.reconcile_of ~= '' then
  return {'reconcile', r.reconcile_of}
end
return {'acquired'}
