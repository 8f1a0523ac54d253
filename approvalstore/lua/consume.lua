-- consume: mark an approved record as used by one execution.
-- KEYS[1] the record. ARGV[2] audience, ARGV[3..6] the actor's id, tenant,
-- kind and on_behalf_of (a JSON list, '' for none), ARGV[7] procedure,
-- ARGV[8] approval type, ARGV[9] quorum (1 or more), ARGV[10] digest,
-- ARGV[11] execution id, ARGV[12] lease (µs), ARGV[13] retention (µs),
-- ARGV[14] '1' to rewrite on a repeat (so that a WAIT after it covers the
-- original write), ARGV[15] the resume's preview digest ('' when the
-- capability has no preview: then the record's is not compared).
-- Replies {'ok', type, approver id, tenant, kind, on_behalf_of, comment,
-- decided_at}: the deciding vote, flat and nothing more, or one of
-- {'not_found'}, {'pending'}, {'rejected'}, {'expired'}, {'consumed'},
-- {'resume_mismatch'}, {'input_mismatch'}, {'stale'}.
--
-- The checks run in the order of consumable() in rules.go; all of them
-- come before the single write, so a refusal changes nothing. A repeat by
-- the execution that consumed the record succeeds: a client may retry
-- after a lost reply. The requester is compared whole: the on_behalf_of
-- lists are JSON that Go encodes the same way for the same list.
local v = redis.call('HMGET', KEYS[1], 'status', 'audience', 'requester_id', 'requester_tenant', 'requester_kind',
  'requester_on_behalf_of', 'expires_at', 'consumed_by', 'procedure', 'type', 'quorum', 'digest',
  'approver_id', 'approver_tenant', 'approver_kind', 'approver_on_behalf_of', 'comment', 'decided_at', 'preview_digest')
local status = v[1]
if not status or v[2] ~= ARGV[2] or v[3] ~= ARGV[3] or v[4] ~= ARGV[4]
    or (v[5] or '') ~= ARGV[5] or (v[6] or '') ~= ARGV[6] then
  return {'not_found'}
end
-- The deciding vote, as the reply carries it on success.
local function approval()
  return {'ok', v[10] or '', v[13] or '', v[14] or '', v[15] or '', v[16] or '', v[17] or '', v[18] or ''}
end
local now = now_us()
local expires = tonumber(v[7])
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
else -- consumed, completed, failed, in_doubt
  if v[8] == ARGV[11] then
    if ARGV[14] == '1' then
      redis.call('HSET', KEYS[1], 'consumed_by', ARGV[11])
    end
    return approval()
  end
  return {'consumed'}
end
if v[9] ~= ARGV[7] or v[10] ~= ARGV[8] or math.max(tonumber(v[11]) or 0, 1) ~= tonumber(ARGV[9]) then
  return {'resume_mismatch'}
end
if v[12] ~= ARGV[10] then
  return {'input_mismatch'}
end
-- A record without a preview digest is stale for a resume with one.
if ARGV[15] ~= '' and (v[19] or '') ~= ARGV[15] then
  return {'stale'}
end
local lease = now + tonumber(ARGV[12])
redis.call('HSET', KEYS[1], 'status', 'consumed', 'consumed_by', ARGV[11], 'consumed_at', int(now), 'lease_until', int(lease))
-- Create set the TTL to expiry + retention; only a lease beyond the expiry
-- needs a longer one.
if lease > expires then
  redis.call('PEXPIRE', KEYS[1], ttl_ms(lease - now + tonumber(ARGV[13])))
end
return approval()
