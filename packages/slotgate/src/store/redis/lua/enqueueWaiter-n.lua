--[[
  enqueueWaiter: put waiters at the tail of their channels' FIFO queues, unless a queue is full; when a slot is free
  and nobody is ahead, the waiter gets it at once. One call registers one waiter in one queue, or (on a single Redis
  node, where the store coalesces the registrations sent in one go: a waiter joining two queues, waiters arriving
  together) several: each does what a call of its own would do, in the order given, except that the Redis clock is
  read once for all of them (an EVALSHA and a TIME per registration saved). On Cluster every call is one registration, so
  its keys share a hash tag.

  Per registration i (from 1), its keys at 2(i-1), its arguments at 8(i-1):
  KEYS[1]  slots key   (sorted set: member = lease token, score = expiry ms)
  KEYS[2]  queue key   (sorted set: member = "<max>|<live>|<token>", score = arrival µs on the Redis clock: a
           registration lives <live> ms past its arrival, includes/queue.lua)
  ARGV[1]     the member "<max>|<live>|<token>": the channel's max the waiter waits under, how long its registration
              lives past its arrival (the wait timeout plus a margin: a waiter with its whole wait ahead; one carried
              over from an earlier pass lives as long, past its deadline, only when its instance died without
              leaving; at most 62 s), and its token
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     max waiting (>= 1)
  ARGV[7]     "0" when the caller knows the queue key outlives this registration (an enqueue of its own checked it
              lately: queues.ts), so its expiry is not checked unless the queue forms anew; otherwise "1"
  ARGV[8]     how long before this call its request reached its instance, µs (at most 50 ms: store.ts), so it stands
              in the queue as of then; "0" or absent for now

  Returns, per registration (one number for a single one, else a list in the order given): 2 = granted at once (the
  token holds a slot until the claim deadline; no message is sent for it), 1 = queued, 0 = queue full; in a list,
  "!<error>" for a registration whose commands failed (a single registration's error is the call's). Registrations
  of one call arrive in the order given (the i-th at the clock's µs + i - 1). When a queue forms (the waiter is left
  waiting with no live waiter ahead of it), every instance holding a slot of the channel is told ("Q\n<ms>\n<channel>"),
  so none of them passes a slot on locally ahead of the queue; a waiter granted at once forms no queue and tells
  nobody.
  Cost per registration: ZCOUNT of the registrations within this one's lifetime (the bound, and whether any live one
  waits ahead), ZADD, and when the caller asks or the queue forms anew, PTTL (+ PEXPIRE when the key has less than
  1.5 registration lifetimes left); and TIME once per call. Only into a queue with no live waiter: ZREMRANGEBYSCORE of
  the registrations older than the longest lifetime, the grant loop (ZRANGE, ZCARD, a ZREM per dead waiter it
  reaches, + ZREMRANGEBYSCORE when the slots look full; a grant at once adds ZADD, PTTL (+ PEXPIRE), ZREM and the
  ZRANGE that finds the queue empty), and when it stays queued ZRANGE of the slots and one PUBLISH per holding
  instance.
]]
--- @include "redisNow"
--- @include "queue"

-- One registration: its keys at KEYS[k + 1..2], its arguments at ARGV[a + 1..8], `order` its place in the call
-- (from 0). Returns 2, 1 or 0 as above.
local function enqueue(k, a, order)
  local slotsKey, queueKey = KEYS[k + 1], KEYS[k + 2]
  local member = ARGV[a + 1]
  local notify = ARGV[a + 4]
  local channelId = ARGV[a + 5]
  local maxWaiting = tonumber(ARGV[a + 6])
  local _, _, liveMs = splitMember(member)
  -- The live registrations are what the bound counts (a dead waiter's member stays until a grant loop reaches it, or
  -- it is older than the longest lifetime) and what this one would wait behind: one ZCOUNT of the arrivals within
  -- this one's lifetime tells both, exactly when the registrations share one lifetime (one wait_timeout_ms). With
  -- mixed lifetimes: a longer-lived registration older than this one's lifetime counts as none (the queue then forms
  -- anew, and the grant loop below finds it ahead), and a shorter-lived one that ran out within it still counts.
  local live = redis.call('ZCOUNT', queueKey, '(' .. deadCutoff(liveMs), '+inf')
  if live >= maxWaiting then
    return 0
  end
  -- Live waiters ahead? A slot that came free was granted to them when it did (a lease that ran out unseen is granted
  -- by the next script that looks: an acquire, a release, a waiter's safety poll), so there is nothing to check here.
  -- Only dead waiters ahead (or none): they go, and the queue forms anew with this one.
  local behind = live > 0
  if not behind then
    dropExpiredWaiters(queueKey)
  end
  -- as of its arrival at its instance: ahead of a registration that reached Redis first but arrived after it
  redis.call('ZADD', queueKey, string.format('%d', redisNowUs() + order - (tonumber(ARGV[a + 8]) or 0)), member)
  -- the key's expiry is checked when the caller asks, and always when the queue forms anew (the key may have just
  -- been created); extended to twice this registration's lifetime when below 1.5 of it, so a check leaves it at least
  -- 1.5 lifetimes and each instance checks about once per quarter lifetime (a queue that emptied and was formed anew
  -- by an instance with a shorter lifetime can go before a registration that skipped its check: docs/redis.md)
  if ARGV[a + 7] ~= '0' or not behind then
    extendQueue(queueKey, liveMs)
  end
  if behind then
    return 1
  end
  local granted, head = grantFree(slotsKey, queueKey, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), notify, channelId,
    member)
  if head ~= member then
    for _, g in ipairs(granted) do
      if g == member then
        return 2
      end
    end
    return 1 -- behind a live waiter: the queue was there before
  end
  -- the waiter leads the queue: it formed with this waiter, so every instance holding a slot is told
  tellHolders(slotsKey, notify, channelId)
  return 1
end

local n = #KEYS / 2
if n == 1 then
  return enqueue(0, 0, 0)
end
-- A registration whose commands fail (a key of the wrong type, say) answers "!<error>" alone: the others stand, as
-- they would have in calls of their own (what it wrote before the error stays, as in a call of its own).
local replies = {}
for i = 1, n do
  local ok, reply = pcall(enqueue, 2 * (i - 1), 8 * (i - 1), i - 1)
  if ok then
    replies[i] = reply
  else
    replies[i] = '!' .. tostring(type(reply) == 'table' and reply.err or reply)
  end
end
return replies
