--[[
  exchangeLoads: puts one instance's counts in the load summary (when given) and reads the summary's snapshot,
  building it from every live instance's counts when none is there. It runs for an exchange that both writes and
  reads, for a reader that found no snapshot, and for a read with no max age; a write alone is a plain HSET, a read
  alone a plain GET. The summary only orders candidates: the acquire script alone decides who holds a slot.

  KEYS[1]  counts hash: instance id → JSON [version, lapse time (ms), channel id, packed count, …], the instance's
           non-zero counts (active + waiting × 2^26) as it last wrote them
  KEYS[2]  cooling hash: channel id → the end of its cooldown (ms)
  KEYS[3]  snapshot string: {"l": [channel id, summed count, …], "c": [channel id, cooldown end, …],
           "v": [instance id, version, …], "n": (instance, channel) counts summed}
           (one hash tag for the three: the call is legal on Cluster)
  ARGV[1]  the snapshot's greatest age in ms: a snapshot there is returned as it is, a missing one built and kept
           that long; 0 builds one from the counts as they are now and keeps nothing
  ARGV[2]  the instance whose counts to write first ('' for none)
  ARGV[3]  its field (JSON as above; '' deletes it)
  ARGV[4]  a new expiry of the counts hash in ms ('' leaves it)
  ARGV[5]  '1' to build a missing snapshot here; '0' to return none (the caller builds it from a plain HGETALL)
  ARGV[6..] instances to delete if their counts have lapsed; nothing else is done then

  An instance whose lapse time has passed (it crashed) is left out and its field deleted.
  Returns { snapshot (false: missing and not built), 1 when this call built it else 0, the Redis time in ms when it
  built it else '' }.
  Cost: HSET or HDEL and PEXPIRE when writing; GET when the age is not 0; to build, TIME, HGETALL of both hashes, HDEL
  of the lapsed, SET when the age is not 0.
]]
--- @include "redisNow"
local maxAge = tonumber(ARGV[1])
if #ARGV > 5 then
  local now = redisNow()
  for i = 6, #ARGV do
    local field = redis.call('HGET', KEYS[1], ARGV[i])
    -- (a field starts with its version, then its lapse time: ["<tag>.<n>",<lapse>,…)
    local lapse = field and tonumber(string.match(field, '^%[%b"",(%-?%d+)'))
    if field and (not lapse or lapse <= now) then
      redis.call('HDEL', KEYS[1], ARGV[i])
    end
  end
  return { false, 0, '' }
end
if ARGV[2] ~= '' then
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  else
    redis.call('HDEL', KEYS[1], ARGV[2])
  end
  if ARGV[4] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
end
if maxAge > 0 then
  local kept = redis.call('GET', KEYS[3])
  if kept then
    return { kept, 0, '' }
  end
end
if ARGV[5] == '0' then
  return { false, 0, '' }
end

local now = redisNow()
local all = redis.call('HGETALL', KEYS[1])
local sums, order, versions, lapsed, pairs = {}, {}, {}, {}, 0
for i = 1, #all, 2 do
  local ok, counts = pcall(cjson.decode, all[i + 1])
  if not ok or type(counts) ~= 'table' or type(counts[2]) ~= 'number' or counts[2] <= now then
    lapsed[#lapsed + 1] = all[i]
  else
    versions[#versions + 1] = all[i]
    versions[#versions + 1] = tostring(counts[1])
    for j = 3, #counts - 1, 2 do
      local id, n = counts[j], tonumber(counts[j + 1])
      if n then
        pairs = pairs + 1
        if not sums[id] then
          sums[id] = 0
          order[#order + 1] = id
        end
        sums[id] = sums[id] + n
      end
    end
  end
end
for i = 1, #lapsed, 1000 do
  redis.call('HDEL', KEYS[1], unpack(lapsed, i, math.min(i + 999, #lapsed)))
end

local live = {}
for _, id in ipairs(order) do
  if sums[id] > 0 then
    live[#live + 1] = id
    live[#live + 1] = string.format('%d', sums[id])
  end
end
local cooling = redis.call('HGETALL', KEYS[2])
-- (cjson writes an empty table as {}: the arrays are joined by hand)
local function array(t)
  return #t > 0 and cjson.encode(t) or '[]'
end
local snapshot = '{"l":' .. array(live) .. ',"c":' .. array(cooling) .. ',"v":' .. array(versions) .. ',"n":' ..
  pairs .. '}'
if maxAge > 0 then
  redis.call('SET', KEYS[3], snapshot, 'PX', maxAge)
end
return { snapshot, 1, nowMs }
