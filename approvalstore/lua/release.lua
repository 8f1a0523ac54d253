-- release: give back a consumption that has no outcome, when the engine
-- knows nothing ran on it: the record is approved again, as if never
-- consumed.
-- KEYS[1] the record. ARGV[2] the execution id.
-- Replies {'ok'} when released, or {'no_op'} for any other record:
-- unknown, never consumed, consumed by another execution, or with an
-- outcome.
local r = read('status', 'consumed_by')
if r.status ~= 'consumed' or r.consumed_by ~= ARGV[2] then
  return {'no_op'}
end
redis.call('HSET', KEYS[1], 'status', 'approved', 'consumed_by', '', 'consumed_at', '', 'lease_until', '')
return {'ok'}
