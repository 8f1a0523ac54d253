-- decide: record one approver's vote. The approver rule against the
-- requester and the application's policy ran in Go (the requester never
-- changes); the rules between voters run here, in the same step as the
-- vote, so that two concurrent voters of one party are never both counted.
-- KEYS[1] the record. ARGV[2] the deciding audience, ARGV[3] '1' to
-- approve or '0' to reject, ARGV[4..7] the approver's id, tenant, kind and
-- on_behalf_of (a JSON list, '' for none), ARGV[8] the comment, ARGV[9]
-- the vote as a JSON object without its time.
-- Replies {'ok', now, record} when the vote counted, {'same', now, record}
-- when it repeats the approver's vote (a no-op), or one of {'not_found'},
-- {'expired'}, {'not_pending', now, record}, or {'voted', now, record}
-- when the approver shares a principal with an earlier voter.
--
-- The checks run in the order of votable() in rules.go; all of them come
-- before the single write, so a refusal changes nothing.
local r = read('status', 'audience', 'expires_at', 'quorum', 'votes')
if not r.status or r.audience ~= ARGV[2] then
  return {'not_found'}
end
local approve = ARGV[3] == '1'
local id, tenant, kind = ARGV[4], ARGV[5], ARGV[6]
local chain, votes = {}, {}
if ARGV[7] ~= '' then
  chain = cjson.decode(ARGV[7])
end
if r.votes and r.votes ~= '' then
  votes = cjson.decode(r.votes)
end

local function contains(list, x)
  for _, y in ipairs(list or {}) do
    if y == x then
      return true
    end
  end
  return false
end

local function same_list(a, b)
  a = a or {}
  if #a ~= #b then
    return false
  end
  for i = 1, #a do
    if a[i] ~= b[i] then
      return false
    end
  end
  return true
end

for _, v in ipairs(votes) do
  if v.approve == approve and v.id == id and (v.tenant or '') == tenant and (v.kind or '') == kind and same_list(v.on_behalf_of, chain) then
    return {'same', int(now_us()), record()}
  end
end
local now = now_us()
if r.status ~= 'pending' then
  return {'not_pending', int(now), record()}
end
if now >= tonumber(r.expires_at) then
  return {'expired'}
end
-- Distinct voters have disjoint principal sets (id and on_behalf_of, as
-- store.SharedPrincipal): two delegates of one person are that person once.
local function shares(v)
  if v.id == id or contains(v.on_behalf_of, id) then
    return true
  end
  for _, p in ipairs(chain) do
    if p == v.id or contains(v.on_behalf_of, p) then
      return true
    end
  end
  return false
end
for _, v in ipairs(votes) do
  if shares(v) then
    return {'voted', int(now), record()}
  end
end

local vote = string.sub(ARGV[9], 1, -2) .. ',"at":' .. int(now) .. '}'
local list = '[' .. vote .. ']'
if r.votes and r.votes ~= '' then
  list = string.sub(r.votes, 1, -2) .. ',' .. vote .. ']'
end
if approve and #votes + 1 < math.max(tonumber(r.quorum) or 0, 1) then
  redis.call('HSET', KEYS[1], 'votes', list)
else
  local status = 'rejected'
  if approve then
    status = 'approved'
  end
  redis.call('HSET', KEYS[1], 'votes', list, 'status', status, 'approver_id', id, 'approver_tenant', tenant,
    'approver_kind', kind, 'approver_on_behalf_of', ARGV[7], 'comment', ARGV[8], 'decided_at', int(now))
end
return {'ok', int(now), record()}
