--[[
  requeueWaiter: moves a waiter's registration to a new member (a new token and the channel's new max, after its
  configuration changed) without losing its place in the channel's FIFO queue.
  - `from` is queued: `to` takes its arrival (or, when `to`'s lifetime has run out since that arrival, one just ahead
    of the oldest live waiter: the waiter is live, and still the oldest);
  - `from` holds a grant it has not claimed (it was the head when granted): the grant is given back, and `to` stands
    at the head again;
  - neither (the queue lost it): `to` joins at the tail, as an enqueue does, unless the queue is full.
  Then the free slots are granted to the oldest waiters, each under its own max, `to` included (no message for it).
  A grant made to `from` is gone for good.

  KEYS[1..4]  slots, queue, peak and limit keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>" of `from`
  ARGV[2]     the member of `to` (its lifetime is `from`'s: the same wait)
  ARGV[3..7]  claim deadline ms, lease TTL ms, grants channel prefix, channel id, adaptive floor or '' (as in
              releaseSlot-4.lua)
  ARGV[8]     max waiting (>= 1), for a waiter the queue lost

  Returns 2 = `to` holds a slot at once (claim it), 1 = queued, 0 = queue full (the queue had lost `from`). When `to`
  is left at the head, every instance holding a slot of the channel is told, as when a queue forms.
  Cost: ZSCORE, ZREM of the member or of the token's slot (+ ZCARD and the high-water mark, ZREMRANGEBYSCORE and
  ZRANGE of the head), or ZCOUNT and ZADD; PTTL (+ PEXPIRE); the grant loop; at the head, ZRANGE of the slots and one PUBLISH per holding instance.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local ch = channelOf(0, 3)
local from, to = ARGV[1], ARGV[2]
local _, _, liveMs = splitMember(to)
-- An arrival just ahead of the oldest live waiter (the dead ones before it go: `to` must not stand behind them).
local function atHead()
  dropExpiredWaiters(ch.queue)
  while true do
    local head = redis.call('ZRANGE', ch.queue, 0, 0, 'WITHSCORES')
    if not head[2] then
      return redisNowUs()
    end
    if not ranOut(head[1], head[2]) then
      -- 1 µs ahead, but never on `to`'s cutoff
      return math.max(tonumber(head[2]) - 1, cutoffUs(liveMs) + 1)
    end
    redis.call('ZREM', ch.queue, head[1])
  end
end
local arrival = redis.call('ZSCORE', ch.queue, from)
if arrival then
  redis.call('ZREM', ch.queue, from)
  if ranOut(to, arrival) then
    arrival = atHead()
  end
elseif removeSlot(ch.slots, ch.peak, (splitMember(from))) == 1 then
  arrival = atHead()
else
  if redis.call('ZCOUNT', ch.queue, '(' .. deadCutoff(liveMs), '+inf') >= tonumber(ARGV[8]) then
    return 0
  end
  arrival = redisNowUs()
end
redis.call('ZADD', ch.queue, string.format('%d', arrival), to)
extendQueue(ch.queue, liveMs)
local granted, head = grantFree(ch, to)
for _, g in ipairs(granted) do
  if g == to then
    return 2
  end
end
if head == to then
  tellHolders(ch)
end
return 1
