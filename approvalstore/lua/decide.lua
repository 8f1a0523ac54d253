-- decide: record an approver's decision; the approver rules ran in Go.
-- KEYS[1] the record. ARGV[2] '1' to approve or '0' to reject, ARGV[3..6]
-- the approver's id, tenant, kind and on_behalf_of (JSON), ARGV[7] the
-- comment. Replies {'ok', now, record} when decided now or when the same
-- approver repeats the same decision (a no-op), else {'not_found'},
-- {'expired'} or {'not_pending', now, record}.
--
-- All checks come before the single write; a refusal changes nothing.
local r = record()
local status = r[f_status]
if not status then
  return {'not_found'}
end
local now = now_us()
local expired = now >= tonumber(r[f_expires_at])
local approve = ARGV[2] == '1'
if status == 'pending' and not expired then
  r[f_status] = 'rejected'
  if approve then
    r[f_status] = 'approved'
  end
  r[f_approver_id], r[f_approver_tenant], r[f_approver_kind], r[f_approver_on_behalf_of] = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  r[f_comment], r[f_decided_at] = ARGV[7], int(now)
  redis.call('HSET', KEYS[1], 'status', r[f_status], 'approver_id', ARGV[3], 'approver_tenant', ARGV[4],
    'approver_kind', ARGV[5], 'approver_on_behalf_of', ARGV[6], 'comment', ARGV[7], 'decided_at', r[f_decided_at])
  return {'ok', int(now), r}
end
if r[f_decided_at] and r[f_approver_id] == ARGV[3] and (status ~= 'rejected') == approve then
  return {'ok', int(now), r}
end
if status == 'pending' and expired then
  return {'expired'}
end
return {'not_pending', int(now), r}
