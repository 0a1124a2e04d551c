--[[
  enqueueWaiter: puts waiters at the tail of their channels' FIFO queues, unless a queue is full; when a slot is free
  and nobody is ahead, the waiter gets it at once. One call registers one waiter, or on a single Redis node several
  (the store sends the registrations of one event-loop turn together): each does what a call of its own would, except
  that they share one reading of the Redis clock. On Cluster every call is one registration.

  Per registration i (from 1), its keys at 4(i-1), its arguments at 8(i-1):
  KEYS[1]  slots key (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[2]  queue key (sorted set: member = "<max>|<live>|<token>", score = arrival µs on the Redis clock; a
           registration lives <live> ms past its arrival, includes/queue.lua)
  KEYS[3]  peak key (hash: the channel's high-water mark, includes/peak.lua)
  KEYS[4]  limit key (hash: the channel's adaptive limit, includes/limit.lua)
  ARGV[1]     the member "<max>|<live>|<token>": the max the waiter waits under, how long its registration lives
              past its arrival (its wait timeout plus a margin, at most 62 s), its token
  ARGV[2..6]  claim deadline ms, lease TTL ms, grants channel prefix, channel id, adaptive floor or '' (as in
              releaseSlot-4.lua)
  ARGV[7]     max waiting (>= 1)
  ARGV[8]     how long before this call its request reached its instance, µs (at most 50 ms), so it stands in the
              queue as of then; "0" for now

  Returns, per registration (one number for a single one, else a list in the order given): 2 = granted at once (the
  token holds a slot until the claim deadline; no message is sent for it), 1 = queued, 0 = queue full; in a list,
  "!<error>" for a registration whose commands failed. Registrations of one call arrive in the order given. When a
  queue forms (the waiter is left waiting with no live waiter ahead), every instance holding a slot of the channel is
  told (see tellHolders in includes/queue.lua).
  Cost: per registration, ZCOUNT of the live registrations, ZADD, PTTL (+ PEXPIRE); behind live waiters, a
  ZREMRANGEBYSCORE of the expired leases (+ the grant loop when it freed one); into a queue with no live waiter,
  ZREMRANGEBYSCORE of the oldest, the grant loop, and when it stays queued ZRANGE of the slots and one PUBLISH per
  holding instance. TIME once per call.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"

-- One registration: its keys after KEYS[k], its arguments after ARGV[a], `order` its place in the call (from 0).
local function enqueue(k, a, order)
  local ch = channelOf(k, a + 2)
  local member = ARGV[a + 1]
  local maxWaiting = tonumber(ARGV[a + 7])
  local _, _, liveMs = splitMember(member)
  -- one ZCOUNT of the arrivals within this registration's lifetime tells both the bound and whether a live waiter is
  -- ahead (exactly so when the registrations share one lifetime, one wait_timeout_ms)
  local live = redis.call('ZCOUNT', ch.queue, '(' .. deadCutoff(liveMs), '+inf')
  if live >= maxWaiting then
    return 0
  end
  local behind = live > 0
  if not behind then
    dropExpiredWaiters(ch.queue)
  end
  redis.call('ZADD', ch.queue, string.format('%d', redisNowUs() + order - (tonumber(ARGV[a + 8]) or 0)), member)
  extendQueue(ch.queue, liveMs)
  -- live waiters ahead: a slot that came free was granted to them when it did, unless its holder died; its lease,
  -- run out, is swept here (a waiter that times out before its first poll never sweeps) and the grant loop runs
  if behind and sweepSlots(ch.slots, ch.peak) == 0 then
    return 1
  end
  local granted, head = grantFree(ch, member)
  if head ~= member then
    for _, g in ipairs(granted) do
      if g == member then
        return 2
      end
    end
    return 1
  end
  tellHolders(ch)
  return 1
end

local n = #KEYS / 4
if n == 1 then
  return enqueue(0, 0, 0)
end
-- a registration whose commands fail answers "!<error>" alone; the others stand, as in calls of their own
local replies = {}
for i = 1, n do
  local ok, reply = pcall(enqueue, 4 * (i - 1), 8 * (i - 1), i - 1)
  if ok then
    replies[i] = reply
  else
    replies[i] = '!' .. tostring(type(reply) == 'table' and reply.err or reply)
  end
end
return replies
