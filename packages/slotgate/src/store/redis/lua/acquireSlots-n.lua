--[[
  acquireSlots: one or more acquire requests in one atomic call (on a single Redis node, the store coalesces the
  requests of one event-loop turn; on Cluster every call is one request for one channel). Each request tries its
  channels in order and is admitted into the first one with a free slot and nobody waiting: a channel with a queue
  first grants its free slots to its oldest waiters (see includes/queue.lua), and a newcomer never takes a slot
  ahead of them (reply 3).

  KEYS[3c-2]  slots key of channel c      (sorted set: member = lease token, score = expiry ms)
  KEYS[3c-1]  cooldown key of channel c   (string; exists while the channel cools down)
  KEYS[3c]    queue key of channel c      (see enqueueWaiter-n.lua)
  ARGV[1]     lease TTL in ms (every request of a call has the same TTL and cooldown setting)
  ARGV[2]     "1" to check cooldowns, "0" to skip the check (cooldown_enabled = false)
  ARGV[3]     number of channels C (= #KEYS / 3)
  ARGV[4]     claim deadline in ms of a grant to a waiter
  ARGV[5]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[6]     now in ms on the Redis clock by the caller's estimate, never earlier than Redis's own (the leases are
              scored from it), or '' to read TIME
  ARGV[7..]   per channel c: max concurrency (> 0), "1" to ask for an extension of its key's expiry ("2": the same
              with `PEXPIRE … GT`, Redis 7; "0": none), its id
  then        per request: its token, then the indexes of the channels to try in order, the last one negated

  Returns one flat array of codes: for each request in order, one code per channel tried, stopping at the first
  admission (1 = acquired, 0 = full, 2 = cooling, 3 = others are waiting). The caller splits it: a request's codes
  end at its first 1 or after its last channel. (Few arguments per request and a flat array of integers are the
  cheapest to pass.)

  Cost per call: one EXISTS over every queue key and every cooldown key of the call (the cooldown keys only when
  checking) and, in a call of up to 8 channels, its first channel's slots key (passed as many times as the other keys
  number + 1, so the count alone says whether it exists: a missing one needs no ZCARD); only when one of the others
  exists, one EXISTS per channel tried and kind (none when the call has one
  channel: its cooldown key is passed twice, so the count alone says which exists), and for a channel with a queue
  the grant loop (for a full channel, only its oldest waiter is read). TIME once when needed (when the caller gave its
  estimate, only to drop expired members: leases and grants are scored from the estimate); ZCARD once per channel (not for a first channel found missing); ZADD per admission. Per call and channel the script
  keeps the count it read, so requests for the same channel in one call share a ZCARD. Expired members are dropped
  when a set looks full (ZREMRANGEBYSCORE, once per channel per call). Lease scores are formatted once per call.
  Key expiry: a slots key that was empty gets PEXPIRE TTL with its first lease. Otherwise the caller asks for an
  extension when it has not extended that key for TTL/4, and the script then extends the expiry to TTL (PTTL first,
  or one PEXPIRE GT on Redis 7, + PEXPIRE NX when that extended nothing: it never shortens a key holding longer
  leases). So every admission leaves the key
  with at least 3/4 TTL at the cost of one PTTL + PEXPIRE (Redis 7: one PEXPIRE) per key per TTL/4 per instance;
  renewals (every TTL/3) extend it to a full TTL, and a crashed holder's channel leaves no key behind within one TTL.
]]
--- @include "redisNow"
--- @include "queue"
local ttl = ARGV[1]
local checkCooldown = ARGV[2] == '1'
local channels = tonumber(ARGV[3])
local claimMs = tonumber(ARGV[4])
local notify = ARGV[5]
useGivenNow(tonumber(ARGV[6]))
-- calls of up to this many channels probe their first channel's slots key with the EXISTS
local SLOTS_PROBE_MAX = 8
local probe = {}
for c = 1, channels do
  if checkCooldown then
    probe[#probe + 1] = KEYS[3 * c - 1]
    if channels == 1 then
      probe[#probe + 1] = KEYS[3 * c - 1]
    end
  end
  probe[#probe + 1] = KEYS[3 * c]
end
-- the first channel's slots key, weighted past the sum of the others: when it is missing its count is 0 without a
-- ZCARD (most calls admit into their first channel, often an empty one where channels are many)
local slotsWeight = 0
if channels <= SLOTS_PROBE_MAX then
  slotsWeight = #probe + 1
  for _ = 1, slotsWeight do
    probe[#probe + 1] = KEYS[1]
  end
end
local found = redis.call('EXISTS', unpack(probe))
local firstMissing = false
if slotsWeight > 0 then
  if found >= slotsWeight then
    found = found - slotsWeight
  else
    firstMissing = true
  end
end
local anyFlag = found > 0
-- queueFound: whether a channel's queue key exists (before any grant); queued: whether waiters are left after grants
local cooling, queueFound, queued, count, swept, extended = {}, {}, {}, {}, {}, {}
if channels == 1 then
  -- one channel: its cooldown key counts 2 (when checked), its queue key 1
  cooling[1] = found >= 2
  queueFound[1] = found % 2 == 1
end
if firstMissing then
  count[1] = 0
end
-- The slots of channel c in use: the count kept for the call (ZCARD the first time), and when that reaches `max`, less
-- the expired leases, swept once per channel per call by Redis's own clock
local function liveCount(c, slots, max)
  local live = count[c] or redis.call('ZCARD', slots)
  if live >= max and not swept[c] then
    swept[c] = true
    live = live - redis.call('ZREMRANGEBYSCORE', slots, '-inf', leaseNow())
  end
  return live
end
local score = nil
local codes = {}
local a = 7 + 3 * channels
while a <= #ARGV do
  local token = ARGV[a]
  local admitted = false
  local last = false
  repeat
    a = a + 1
    local c = tonumber(ARGV[a])
    if c < 0 then
      c = -c
      last = true
    end
    local slots = KEYS[3 * c - 2]
    local max = tonumber(ARGV[4 + 3 * c])
    local cool, waiting = false, false
    if anyFlag and not admitted then
      if checkCooldown then
        cool = cooling[c]
        if cool == nil then
          cool = redis.call('EXISTS', KEYS[3 * c - 1]) == 1
          cooling[c] = cool
        end
      end
      if not cool then
        waiting = queued[c]
        if waiting == nil then
          waiting = queueFound[c]
          if waiting == nil then
            waiting = redis.call('EXISTS', KEYS[3 * c]) == 1
          end
          if waiting then
            -- free slots go to the oldest waiters first; whoever is left waiting still comes before this request. A
            -- channel full under this request's max (after one sweep of expired leases) whose oldest waiter is live
            -- has none to give: its queue stands, and only that oldest one is read (the common case under overload:
            -- the grant loop would read its window; a waiter asking under a higher max than this request, after a
            -- settings change, is granted by the next release or a safety poll that runs the grant loop instead)
            local live = liveCount(c, slots, max)
            local oldest = live >= max and redis.call('ZRANGE', KEYS[3 * c], 0, 0, 'WITHSCORES') or {}
            if oldest[1] and not ranOut(oldest[1], oldest[2]) then
              count[c] = live
            else
              local _, head = grantFree(slots, KEYS[3 * c], claimMs, tonumber(ttl), notify, ARGV[6 + 3 * c], nil)
              count[c] = nil
              waiting = head ~= nil
            end
          end
          queued[c] = waiting
        end
      end
    end
    if admitted then
      -- the request was admitted: the rest of its channels are not tried
    elseif cool then
      codes[#codes + 1] = 2
    elseif waiting then
      codes[#codes + 1] = 3
    else
      local live = liveCount(c, slots, max)
      if live < max then
        if not score then
          score = string.format('%d', redisNow() + tonumber(ttl))
        end
        redis.call('ZADD', slots, score, token)
        if live == 0 then
          redis.call('PEXPIRE', slots, ttl)
          extended[c] = true
        elseif ARGV[5 + 3 * c] ~= '0' and not extended[c] then
          extended[c] = true
          if ARGV[5 + 3 * c] == '2' then
            -- GT takes a key without expiry as never expiring: NX gives one to such a key (none of ours lacks one)
            if redis.call('PEXPIRE', slots, ttl, 'GT') == 0 then
              redis.call('PEXPIRE', slots, ttl, 'NX')
            end
          elseif redis.call('PTTL', slots) < tonumber(ttl) then
            redis.call('PEXPIRE', slots, ttl)
          end
        end
        count[c] = live + 1
        codes[#codes + 1] = 1
        admitted = true
      else
        count[c] = live
        codes[#codes + 1] = 0
      end
    end
  until last
  a = a + 1
end
return codes
