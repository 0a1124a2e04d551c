--[[
  enqueueWaiter: put waiters at the tail of their channels' FIFO queues, unless a queue is full; when a slot is free
  and nobody is ahead, the waiter gets it at once. One call registers one waiter in one queue, or (on a single Redis
  node, where the store coalesces the registrations sent in one go: a waiter joining two queues, waiters arriving
  together) several: each does what a call of its own would do, in the order given, except that the Redis clock is
  read once for all of them (an EVALSHA and a TIME per registration saved). On Cluster every call is one registration, so
  its keys share a hash tag.

  Per registration i (from 1), its keys at 3(i-1), its arguments at 9(i-1):
  KEYS[1]  slots key   (sorted set: member = lease token, score = expiry ms)
  KEYS[2]  waiters key (sorted set: member = "<max>|<token>", score = registration expiry ms)
  KEYS[3]  queue key   (sorted set: member = "<max>|<token>", score = arrival µs on the Redis clock)
  ARGV[1]     the member "<max>|<token>": the waiter's token and the channel's max it waits under
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     max waiting (>= 1)
  ARGV[7]     registration TTL in ms (the wait deadline plus a margin)
  ARGV[8]     "0" when the caller knows the keys outlive this registration (an enqueue of its own checked them lately:
              queues.ts), so their expiry is not checked unless the queue forms anew; otherwise "1"
  ARGV[9]     the keys' TTL basis in ms (at least ARGV[7]): the registration TTL of a waiter with its whole wait ahead,
              so keys extended by a waiter near its deadline still last as long as those of any waiter (absent with a
              single registration: ARGV[7])

  Returns, per registration (one number for a single one, else a list in the order given): 2 = granted at once (the
  token holds a slot until the claim deadline; no message is sent for it), 1 = queued, 0 = queue full; in a list,
  "!<error>" for a registration whose commands failed (a single registration's error is the call's). Registrations
  of one call arrive in the order given (the i-th at the clock's µs + i - 1). When a queue forms (the waiter is left
  waiting with no live waiter ahead of it), every instance holding a slot of the channel is told ("q\n<channel>"),
  so none of them passes a slot on locally ahead of the queue; a waiter granted at once forms no queue and tells
  nobody.
  Cost per registration: ZCOUNT of the live registrations (the bound, and whether any waits ahead), 2 ZADD, and when
  the caller asks or the queue forms anew, PTTL (+ 2 PEXPIRE when the keys have less than 1.5 registration TTLs
  left); and TIME once per call. Only into a queue with no live waiter: ZRANGEBYSCORE of the dead registrations (+ 2
  ZREM when there are any), the grant loop (ZRANGE, ZCARD, + ZREMRANGEBYSCORE when the slots look full; a grant at
  once adds ZSCORE, ZADD, PTTL, 2 ZREM), and when it stays queued ZRANGE of the slots and one PUBLISH per holding
  instance.
]]
--- @include "redisNow"
--- @include "queue"

-- One registration: its keys at KEYS[k + 1..3], its arguments at ARGV[a + 1..9], `order` its place in the call
-- (from 0). Returns 2, 1 or 0 as above.
local function enqueue(k, a, order)
  local slotsKey, waitersKey, queueKey = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local member = ARGV[a + 1]
  local notify = ARGV[a + 4]
  local channelId = ARGV[a + 5]
  local maxWaiting = tonumber(ARGV[a + 6])
  local ttl = tonumber(ARGV[a + 7])
  -- The live registrations are what the bound counts (a dead waiter's member stays until a grant reaches it or the
  -- queue forms anew) and what this one would wait behind: one ZCOUNT tells both.
  local live = redis.call('ZCOUNT', waitersKey, '(' .. redisNow(), '+inf')
  if live >= maxWaiting then
    return 0
  end
  -- Live waiters ahead? A slot that came free was granted to them when it did (a lease that ran out unseen is granted
  -- by the next script that looks: an acquire, a release, a waiter's safety poll), so there is nothing to check here.
  -- Only dead waiters ahead (or none): they go, and the queue forms anew with this one.
  local behind = live > 0
  if not behind then
    dropExpiredWaiters(waitersKey, queueKey)
  end
  redis.call('ZADD', queueKey, redisNowUs() + order, member)
  redis.call('ZADD', waitersKey, redisNow() + ttl, member)
  -- the two keys are always written and extended together: one PTTL tells for both. Checked when the caller asks,
  -- and always when the queue forms anew (the keys may have just been created); extended to twice the registration
  -- TTL when below 1.5 TTL, so a check leaves them at least 1.5 TTL and each instance checks about once per quarter TTL
  if ARGV[a + 8] ~= '0' or not behind then
    local keyTtl = math.max(ttl, tonumber(ARGV[a + 9]) or 0)
    if redis.call('PTTL', waitersKey) < keyTtl + math.floor(keyTtl / 2) then
      redis.call('PEXPIRE', waitersKey, 2 * keyTtl)
      redis.call('PEXPIRE', queueKey, 2 * keyTtl)
    end
  end
  if behind then
    return 1
  end
  local granted, head = grantFree(slotsKey, waitersKey, queueKey, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), notify,
    channelId, member)
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

local n = #KEYS / 3
if n == 1 then
  return enqueue(0, 0, 0)
end
-- A registration whose commands fail (a key of the wrong type, say) answers "!<error>" alone: the others stand, as
-- they would have in calls of their own (what it wrote before the error stays, as in a call of its own).
local replies = {}
for i = 1, n do
  local ok, reply = pcall(enqueue, 3 * (i - 1), 9 * (i - 1), i - 1)
  if ok then
    replies[i] = reply
  else
    replies[i] = '!' .. tostring(type(reply) == 'table' and reply.err or reply)
  end
end
return replies
