-- outcome: record how the consuming execution ended.
-- KEYS[1] the record. ARGV[2] the execution id, ARGV[3] the new status
-- ('completed' or 'failed'), ARGV[4] the outcome code.
-- Replies {'ok'} (also when recorded already) or {'not_found'} when the
-- record is unknown or another execution consumed it.
local r = redis.call('HMGET', KEYS[1], 'status', 'consumed_by')
if not r[1] or not r[2] or r[2] == '' or r[2] ~= ARGV[2] then
  return {'not_found'}
end
if r[1] ~= 'consumed' then
  return {'ok'}
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'outcome', ARGV[4], 'outcome_at', int(now_us()))
return {'ok'}
