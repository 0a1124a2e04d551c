--[[
  acquireSlots: one or more acquire requests in one atomic call (on a single Redis node the store sends the requests
  of one event-loop turn together; on Cluster every call is for one channel). Each request tries its channels in
  order and is admitted into the first one with a free slot and nobody waiting: a channel with a queue first grants
  its free slots to its oldest waiters (includes/queue.lua), and a newcomer never takes a slot ahead of them.

  KEYS[4c-3]  slots key of channel c     (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[4c-2]  cooldown key of channel c  (string; exists while the channel cools down)
  KEYS[4c-1]  queue key of channel c     (see enqueueWaiter-n.lua)
  KEYS[4c]    peak key of channel c      (hash: its high-water mark, includes/peak.lua)
  ARGV[1]     lease TTL in ms (every request of a call has the same TTL and cooldown setting)
  ARGV[2]     "1" to check cooldowns, "0" to skip the check (cooldown_enabled = false)
  ARGV[3]     number of channels C (= #KEYS / 4)
  ARGV[4]     claim deadline in ms of a grant to a waiter
  ARGV[5]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[4+2c]  max concurrency of channel c (> 0)
  ARGV[5+2c]  id of channel c, as messages name it
  then        per request: its token, then the indexes of the channels to try in order, the last one negated

  Returns one flat array of codes: for each request in order, one code per channel tried, stopping at the first
  admission (1 = acquired, 0 = full, 2 = cooling, 3 = others are waiting).
  Cost: per channel tried (once per call), EXISTS of its cooldown key (when checking) and of its queue key, ZCARD;
  for a channel with a queue, the grant loop (on a full channel only its oldest waiter is read); a ZREMRANGEBYSCORE
  of expired leases when the slots look full (when it removes some, ZCARD and the high-water mark). Per admission:
  ZADD and PTTL (+ PEXPIRE once per quarter TTL). TIME once per call.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "queue"
local ttl = tonumber(ARGV[1])
local checkCooldown = ARGV[2] == '1'
local channels = tonumber(ARGV[3])
-- per channel c, what this call found: cooling, waiters left after its grants, the slots in use, swept
local cooling, queued, count, swept = {}, {}, {}, {}

local function chOf(c)
  return {
    slots = KEYS[4 * c - 3],
    queue = KEYS[4 * c - 1],
    peak = KEYS[4 * c],
    claimMs = tonumber(ARGV[4]),
    leaseTtl = ttl,
    notify = ARGV[5],
    id = ARGV[5 + 2 * c],
  }
end

-- The slots of channel c in use: counted once per call, less the expired leases once it reaches `max`.
local function liveCount(c, max)
  local live = count[c] or redis.call('ZCARD', KEYS[4 * c - 3])
  if live >= max and not swept[c] then
    swept[c] = true
    live = live - sweepSlots(KEYS[4 * c - 3], KEYS[4 * c])
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
  if redis.call('EXISTS', KEYS[4 * c - 1]) == 1 then
    -- a full channel whose oldest waiter is live has nothing to grant: only that one is read
    local oldest = liveCount(c, max) >= max and redis.call('ZRANGE', KEYS[4 * c - 1], 0, 0, 'WITHSCORES') or {}
    if oldest[1] and not ranOut(oldest[1], oldest[2]) then
      left = true
    else
      local _, head = grantFree(chOf(c), nil)
      count[c] = nil
      left = head ~= nil
    end
  end
  queued[c] = left
  return left
end

local codes = {}
local a = 6 + 2 * channels
while a <= #ARGV do
  local token = ARGV[a]
  local last = false
  repeat
    a = a + 1
    local c = tonumber(ARGV[a])
    if c < 0 then
      c, last = -c, true
    end
    local max = tonumber(ARGV[4 + 2 * c])
    if checkCooldown and cooling[c] == nil then
      cooling[c] = redis.call('EXISTS', KEYS[4 * c - 2]) == 1
    end
    if checkCooldown and cooling[c] then
      codes[#codes + 1] = 2
    elseif waitersLeft(c, max) then
      codes[#codes + 1] = 3
    elseif liveCount(c, max) < max then
      redis.call('ZADD', KEYS[4 * c - 3], redisNow() + ttl, token)
      extendSlots(KEYS[4 * c - 3], ttl)
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
