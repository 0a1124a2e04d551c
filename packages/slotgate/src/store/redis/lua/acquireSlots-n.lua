--[[
  acquireSlots: one or more acquire requests in one atomic call (on a single Redis node the store sends the requests
  of one event-loop turn together; on Cluster every call is for one channel). Each request tries its channels in
  order and is admitted into the first one with a free slot and nobody waiting: a channel with a queue first grants
  its free slots to its oldest waiters (includes/queue.lua), and a newcomer never takes a slot ahead of them.

  KEYS[5c-4]  slots key of channel c     (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[5c-3]  cooldown key of channel c  (string; exists while the channel cools down)
  KEYS[5c-2]  queue key of channel c     (see enqueueWaiter-n.lua)
  KEYS[5c-1]  peak key of channel c      (hash: its high-water mark, includes/peak.lua)
  KEYS[5c]    limit key of channel c     (hash: its adaptive limit, includes/limit.lua)
  ARGV[1]     lease TTL in ms (every request of a call has the same TTL and cooldown setting)
  ARGV[2]     "1" to check cooldowns, "0" to skip the check (cooldown_enabled = false)
  ARGV[3]     number of channels C (= #KEYS / 5)
  ARGV[4]     claim deadline in ms of a grant to a waiter
  ARGV[5]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[3+3c]  max concurrency of channel c (> 0)
  ARGV[4+3c]  id of channel c, as messages name it
  ARGV[5+3c]  the floor of channel c's adaptive limit, or '': with one, the channel admits up to its adaptive limit
              when one is stored (never above its max)
  then        per request: its token, then the indexes of the channels to try in order, the last one negated

  Returns one flat array of codes: for each request in order, one code per channel tried, stopping at the first
  admission (1 = acquired, 0 = full, 2 = cooling, 3 = others are waiting).
  Cost: per channel tried (once per call), EXISTS of its cooldown key (when checking) and of its queue key, ZCARD;
  for a channel with a queue, the grant loop (on a full channel only its oldest waiter is read); a ZREMRANGEBYSCORE
  of expired leases when the slots look full (when it removes some, ZCARD and the high-water mark); with a floor,
  HGET of its limit. Per admission: ZADD and PTTL (+ PEXPIRE once per quarter TTL). TIME once per call.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local ttl = tonumber(ARGV[1])
local checkCooldown = ARGV[2] == '1'
local channels = tonumber(ARGV[3])
-- per channel c, what this call found: cooling, waiters left after its grants, the slots in use, swept, its max
local cooling, queued, count, swept, maxes = {}, {}, {}, {}, {}

local function chOf(c)
  return {
    slots = KEYS[5 * c - 4],
    queue = KEYS[5 * c - 2],
    peak = KEYS[5 * c - 1],
    limit = KEYS[5 * c],
    claimMs = tonumber(ARGV[4]),
    leaseTtl = ttl,
    notify = ARGV[5],
    id = ARGV[4 + 3 * c],
    floor = limitFloor(ARGV[5 + 3 * c]),
  }
end

-- Channel c's max: its adaptive limit when it has one (read once per call), else its max concurrency.
local function maxOf(c)
  if not maxes[c] then
    local max = tonumber(ARGV[3 + 3 * c])
    local floor = limitFloor(ARGV[5 + 3 * c])
    local cap = floor and limitCap(KEYS[5 * c], floor)
    maxes[c] = cap and math.min(cap, max) or max
  end
  return maxes[c]
end

-- The slots of channel c in use: counted once per call, less the expired leases once it reaches `max`.
local function liveCount(c, max)
  local live = count[c] or redis.call('ZCARD', KEYS[5 * c - 4])
  if live >= max and not swept[c] then
    swept[c] = true
    live = live - sweepSlots(KEYS[5 * c - 4], KEYS[5 * c - 1])
  end
  count[c] = live
  return live
end

-- Whether waiters stand in channel c's queue once its free slots went to them.
local function waitersLeft(c, max)
  if queued[c] ~= nil then
    return queued[c]
  end
  local left = false
  if redis.call('EXISTS', KEYS[5 * c - 2]) == 1 then
    -- a full channel whose oldest waiter is live has nothing to grant: only that one is read
    local oldest = liveCount(c, max) >= max and redis.call('ZRANGE', KEYS[5 * c - 2], 0, 0, 'WITHSCORES') or {}
    if oldest[1] and not ranOut(oldest[1], oldest[2]) then
      left = true
    else
      local ch = chOf(c)
      ch.cap = ch.floor and maxes[c] or nil
      local _, head = grantFree(ch, nil)
      count[c] = nil
      left = head ~= nil
    end
  end
  queued[c] = left
  return left
end

local codes = {}
local a = 6 + 3 * channels
while a <= #ARGV do
  local token = ARGV[a]
  local last = false
  repeat
    a = a + 1
    local c = tonumber(ARGV[a])
    if c < 0 then
      c, last = -c, true
    end
    local max = maxOf(c)
    if checkCooldown and cooling[c] == nil then
      cooling[c] = redis.call('EXISTS', KEYS[5 * c - 3]) == 1
    end
    if checkCooldown and cooling[c] then
      codes[#codes + 1] = 2
    elseif waitersLeft(c, max) then
      codes[#codes + 1] = 3
    elseif liveCount(c, max) < max then
      redis.call('ZADD', KEYS[5 * c - 4], redisNow() + ttl, token)
      extendSlots(KEYS[5 * c - 4], ttl)
      count[c] = count[c] + 1
      codes[#codes + 1] = 1
      -- admitted: the rest of its channels are not tried
      while not last do
        a = a + 1
        last = tonumber(ARGV[a]) < 0
      end
    else
      codes[#codes + 1] = 0
    end
  until last
  a = a + 1
end
return codes
