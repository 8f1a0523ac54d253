-- outcome: record how the consuming execution ended.
-- KEYS[1] the record. ARGV[2] the execution id, ARGV[3] the outcome's
-- status ('completed', 'failed' or 'in_doubt'), ARGV[4] its code, ARGV[5]
-- '1' when the result came late.
-- Replies {'ok'} (also when the record keeps the result it has) or
-- {'not_found'} when the record is unknown or another execution consumed
-- it.
--
-- As takesOutcome() in rules.go: a consumed record (within its lease or
-- past it) takes any outcome, one recorded in_doubt a result (completed or
-- failed); a result is final.
local r = read('status', 'consumed_by')
if not r.status or not r.consumed_by or r.consumed_by == '' or r.consumed_by ~= ARGV[2] then
  return {'not_found'}
end
if r.status ~= 'consumed' and not (r.status == 'in_doubt' and ARGV[3] ~= 'in_doubt') then
  return {'ok'}
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'outcome', ARGV[4], 'outcome_late', ARGV[5], 'outcome_at', int(now_us()))
return {'ok'}
