-- consume: mark an approved record as used by one execution.
-- KEYS[1] the record. ARGV[2] audience, ARGV[3] requester id, ARGV[4]
-- requester tenant, ARGV[5] procedure, ARGV[6] approval type, ARGV[7]
-- digest, ARGV[8] execution id, ARGV[9] lease (µs), ARGV[10] retention
-- (µs), ARGV[11] '1' to rewrite on a repeat (so that a WAIT after it
-- covers the original write).
-- Replies {'ok', now, record}, or one of {'not_found'}, {'pending'},
-- {'rejected'}, {'expired'}, {'consumed'}, {'resume_mismatch'},
-- {'input_mismatch'}.
--
-- The checks run in the order of consumable() in rules.go; all of them
-- come before the single write, so a refusal changes nothing. A repeat by
-- the execution that consumed the record succeeds: a client may retry
-- after a lost reply. One read serves the checks and the reply.
local r = record()
local status = r[f_status]
if not status or r[f_audience] ~= ARGV[2] or r[f_requester_id] ~= ARGV[3] or r[f_requester_tenant] ~= ARGV[4] then
  return {'not_found'}
end
local now = now_us()
local expires = tonumber(r[f_expires_at])
if status == 'approved' then
  if now >= expires then
    return {'expired'}
  end
elseif status == 'pending' then
  if now >= expires then
    return {'expired'}
  end
  return {'pending'}
elseif status == 'rejected' or status == 'cancelled' then
  return {'rejected'}
elseif status == 'expired' then -- never stored today; read like rules.go would
  return {'expired'}
else -- consumed, completed, failed (in_doubt is consumed past its lease)
  if r[f_consumed_by] == ARGV[8] then
    if ARGV[11] == '1' then
      redis.call('HSET', KEYS[1], 'consumed_by', ARGV[8])
    end
    return {'ok', int(now), r}
  end
  return {'consumed'}
end
if r[f_procedure] ~= ARGV[5] or r[f_type] ~= ARGV[6] then
  return {'resume_mismatch'}
end
if r[f_digest] ~= ARGV[7] then
  return {'input_mismatch'}
end
local lease = now + tonumber(ARGV[9])
r[f_status], r[f_consumed_by], r[f_consumed_at], r[f_lease_until] = 'consumed', ARGV[8], int(now), int(lease)
redis.call('HSET', KEYS[1], 'status', r[f_status], 'consumed_by', r[f_consumed_by],
  'consumed_at', r[f_consumed_at], 'lease_until', r[f_lease_until])
-- Create set the TTL to expiry + retention; only a lease beyond the expiry
-- needs a longer one.
if lease > expires then
  redis.call('PEXPIRE', KEYS[1], ttl_ms(lease - now + tonumber(ARGV[10])))
end
return {'ok', int(now), r}
