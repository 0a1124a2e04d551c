--[[
  exchangeLoads: one instance's exchange with the load summary (docs/redis.md, "The load summary"). The instance puts
  in its own counts of the channels that changed since its last exchange, and reads the fleet's counts, in one call.
  The summary only orders candidates: the acquire script alone decides who holds a slot.

  KEYS[1]  summary    hash  channel id → packed count (active + waiting × 2^26) summed over the reporting instances
  KEYS[2]  reporters  zset  instance id → the time its contributions lapse (ms, Redis clock)
  KEYS[3]  this instance's contributions: hash channel id → packed count, as it last reported it
  KEYS[4]  cooling    hash  channel id → the end of its cooldown (ms, Redis clock)
  KEYS[5]  snapshot   string: the summary's non-zero counts and the cooldown ends as one JSON object
           {"l": [id, count, …], "c": [id, end, …]}, shared by every reader until it expires (each reader says how
           old it may be)
  (one hash tag for all five and for every instance's hash, so the call is legal on Redis Cluster)
  ARGV[1]  this instance's id (its reporters member)
  ARGV[2]  mode: 'd' puts in the counts given; 'f' also zeroes every channel it reported before and does not name
           now (a full report); 'l' takes everything it reported out (it leaves)
  ARGV[3]  keep: ms its contributions stay without another exchange that gives a keep; '' leaves the lapse time as is
  ARGV[4]  sweep: how many lapsed instances to take out at most (0: none)
  ARGV[5]  an instance's hash is ARGV[5] .. its id .. ARGV[6]
  ARGV[6]
  ARGV[7]  n: channels reported
  ARGV[8..7+2n]  per channel: id, packed count now
  then     (only to read) the snapshot's greatest age in ms: 0 reads the summary itself and stores no snapshot; a
           missing snapshot is built from the summary (after this call's changes) and kept for that long
  then     channels whose sums to return exactly when an older snapshot serves the rest (those this instance changed
           since that snapshot may have been built)

  The change each count makes is taken from this instance's hash, so the summary always equals the sum of the
  instances' hashes whatever was lost or sent twice: an exchange that timed out is simply sent again.
  Returns { 1, or 0 when a keep found this instance unregistered (the summary lost its contributions, or took them
  out as lapsed: it should send a full report), the Redis time in ms (or ''), the snapshot (false when nothing was
  read), 1 when this call built it (else 0), m, then m exact sums in the order asked (m = 0 when the snapshot was
  built in this call: it holds them) }.
  Cost: HMGET of this instance's hash and HSET of the counts given (when any), HINCRBY per count that changed, GET of
  the snapshot when reading (a missing one: HGETALL of the summary and of the cooling hash, and SET), HMGET of exact
  channels no HINCRBY of this call gave; with a keep, TIME, ZADD and a PEXPIRE of the summary, the
  reporters and this instance's hash (to 1.25 × keep); with a sweep, TIME, ZRANGEBYSCORE, and per lapsed instance
  HGETALL, DEL, ZREM and an HINCRBY per channel it held.
]]
--- @include "redisNow"
local summary, reporters, mine = KEYS[1], KEYS[2], KEYS[3]
local mode = ARGV[2]
local n = tonumber(ARGV[7])

-- Adds the change of each count (`changes`: channel id → change) to the summary.
-- The sums those HINCRBYs answered: an exact read of these channels needs no other command.
local sums = {}
local function apply(changes)
  for id, change in pairs(changes) do
    if change ~= 0 then
      sums[id] = redis.call('HINCRBY', summary, id, change)
    end
  end
end

-- Takes out everything a hash holds (an instance leaving or lapsed) and deletes it.
local function takeOut(key)
  local held = redis.call('HGETALL', key)
  local changes = {}
  for i = 1, #held, 2 do
    changes[held[i]] = -tonumber(held[i + 1])
  end
  apply(changes)
  redis.call('DEL', key)
end

local status = 1
if ARGV[3] ~= '' and mode ~= 'l' then
  local keep = tonumber(ARGV[3])
  local added = redis.call('ZADD', reporters, redisNow() + keep, ARGV[1])
  if added == 1 and mode == 'd' then
    -- unknown here: what it reported before is gone, so its other channels are missing from the summary
    status = 0
  end
  -- what nobody renews goes by itself: once no instance that holds anything is left, the summary's keys expire
  -- (an instance holding anything renews every quarter of its keep)
  local expiry = keep + math.floor(keep / 4)
  redis.call('PEXPIRE', summary, expiry)
  redis.call('PEXPIRE', reporters, expiry)
  redis.call('PEXPIRE', mine, expiry)
end

if mode == 'l' then
  takeOut(mine)
  redis.call('ZREM', reporters, ARGV[1])
elseif status == 1 and (n > 0 or mode == 'f') then
  local changes = {}
  if mode == 'f' then
    local held = redis.call('HGETALL', mine)
    for i = 1, #held, 2 do
      changes[held[i]] = -tonumber(held[i + 1])
    end
    redis.call('DEL', mine)
  end
  if n > 0 then
    local ids, counts, set = {}, {}, {}
    for i = 1, n do
      ids[i] = ARGV[6 + 2 * i]
      counts[i] = tonumber(ARGV[7 + 2 * i])
      set[#set + 1] = ids[i]
      set[#set + 1] = ARGV[7 + 2 * i]
    end
    local before = {}
    if mode == 'd' then
      before = redis.call('HMGET', mine, unpack(ids))
    end
    for i = 1, n do
      local was = changes[ids[i]] or -(tonumber(before[i]) or 0)
      changes[ids[i]] = was + counts[i]
    end
    redis.call('HSET', mine, unpack(set))
  end
  apply(changes)
end

if tonumber(ARGV[4]) > 0 then
  local lapsed = redis.call('ZRANGEBYSCORE', reporters, '-inf', redisNow(), 'LIMIT', 0, tonumber(ARGV[4]))
  for _, id in ipairs(lapsed) do
    takeOut(ARGV[5] .. id .. ARGV[6])
    redis.call('ZREM', reporters, id)
  end
end

local reply = { status, nowMs or '', false, 0, 0 }
local at = 8 + 2 * n
if at <= #ARGV then
  local maxAge = tonumber(ARGV[at])
  local snapshot = false
  if maxAge > 0 then
    snapshot = redis.call('GET', KEYS[5])
  end
  if snapshot then
    -- built before this call's changes (or another's since): the channels named get their sums now
    local missing, where = {}, {}
    for i = at + 1, #ARGV do
      local sum = sums[ARGV[i]]
      reply[#reply + 1] = sum and string.format('%d', sum) or ''
      if not sum then
        missing[#missing + 1] = ARGV[i]
        where[#missing] = #reply
      end
    end
    if #missing > 0 then
      local values = redis.call('HMGET', summary, unpack(missing))
      for i = 1, #missing do
        reply[where[i]] = values[i] or '0'
      end
    end
    reply[5] = #ARGV - at
  else
    reply[4] = 1
    local all = redis.call('HGETALL', summary)
    local live = {}
    for i = 1, #all, 2 do
      if all[i + 1] ~= '0' then
        live[#live + 1] = all[i]
        live[#live + 1] = all[i + 1]
      end
    end
    local cooling = redis.call('HGETALL', KEYS[4])
    -- (cjson writes an empty table as {}: the arrays are joined by hand)
    snapshot = '{"l":' .. (#live > 0 and cjson.encode(live) or '[]') .. ',"c":' ..
      (#cooling > 0 and cjson.encode(cooling) or '[]') .. '}'
    if maxAge > 0 then
      redis.call('SET', KEYS[5], snapshot, 'PX', maxAge)
    end
  end
  reply[3] = snapshot
end
return reply
