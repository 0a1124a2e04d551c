--[[
  enqueueWaiter: put a waiter at the tail of the channel's FIFO queue, unless the queue is full; when a slot is free
  and nobody is ahead, the waiter gets it at once.

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

  Returns 2 = granted at once (the token holds a slot until the claim deadline; no message is sent for it),
  1 = queued, 0 = queue full. When the queue forms (the waiter is left waiting with no live waiter ahead of it),
  every instance holding a slot of the channel is told ("q\n<channel>"), so none of them passes a slot on locally
  ahead of the queue; a waiter granted at once forms no queue and tells nobody.
  Cost: TIME, ZCARD (+ ZRANGEBYSCORE and ZREMs when it looks full), 2 ZADD, PTTL (+ 2 PEXPIRE when the keys have less than a registration TTL left); behind others, a
  ZCOUNT of the live ones. Only into a queue with no live waiter: the grant loop (ZRANGE, ZCARD, + ZREMRANGEBYSCORE
  when the slots look full; a grant at once adds ZSCORE, ZADD, PTTL, 2 ZREM), and when it stays queued
  ZRANGE of the slots and one PUBLISH per holding instance.
]]
--- @include "redisNow"
--- @include "queue"
local member = ARGV[1]
local notify = ARGV[4]
local channelId = ARGV[5]
local maxWaiting = tonumber(ARGV[6])
local ttl = tonumber(ARGV[7])
local n = redis.call('ZCARD', KEYS[3])
if n >= maxWaiting then
  n = n - dropExpiredWaiters(KEYS[2], KEYS[3])
  if n >= maxWaiting then
    return 0
  end
end
-- Live waiters ahead? A slot that came free was granted to them when it did (a lease that ran out unseen is granted
-- by the next script that looks: an acquire, a release, a waiter's safety poll), so there is nothing to check here.
-- Only dead waiters ahead: they go, and the queue forms anew with this one.
local behind = false
if n > 0 then
  behind = redis.call('ZCOUNT', KEYS[2], '(' .. redisNow(), '+inf') > 0
  if not behind then
    dropExpiredWaiters(KEYS[2], KEYS[3])
  end
end
redis.call('ZADD', KEYS[3], redisNowUs(), member)
redis.call('ZADD', KEYS[2], redisNow() + ttl, member)
-- the two keys are always written and extended together: one PTTL tells for both
-- extended to twice the registration TTL when below it: a busy queue extends its keys once per TTL, not per enqueue
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], 2 * ttl)
  redis.call('PEXPIRE', KEYS[3], 2 * ttl)
end
if behind then
  return 1
end
local granted, head = grantFree(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), tonumber(ARGV[3]), notify, channelId, member)
if head ~= member then
  for _, g in ipairs(granted) do
    if g == member then
      return 2
    end
  end
  return 1 -- behind a live waiter: the queue was there before
end
-- the waiter leads the queue: it formed with this waiter, so every instance holding a slot is told
tellHolders(KEYS[1], notify, channelId)
return 1
