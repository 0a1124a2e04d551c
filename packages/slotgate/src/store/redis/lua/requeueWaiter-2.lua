--[[
  requeueWaiter: move a waiter's registration to a new member (a new token and the channel's new max, after its
  configuration changed) without losing its place in the channel's FIFO queue.
  - `from` is queued: `to` takes its arrival time (or, when `to`'s lifetime has run out since that arrival, one just
    ahead of the oldest live waiter: the waiter is live, and still the oldest);
  - `from` holds a grant it has not claimed (it was the head when granted): the grant is given back, and `to` stands
    at the head again;
  - neither (the queue lost it): `to` joins at the tail, as an enqueue does, unless the queue is full.
  Then the free slots are granted to the oldest waiters, each under its own max, `to` included (no message for it).
  A grant made to `from` is gone for good: its token is in neither the queue nor the slots any more.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>" of `from`
  ARGV[2]     the member "<max>|<live>|<token>" of `to` (its lifetime is `from`'s: the same wait)
  ARGV[3]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[4]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[5]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[6]     the channel id, as messages name it
  ARGV[7]     max waiting (>= 1), for a waiter the queue lost

  Returns 2 = `to` holds a slot at once (claim it), 1 = queued, 0 = queue full (the queue had lost `from`).
  When `to` is left at the head, every instance holding a slot of the channel is told ("Q\n<ms>\n<channel>"), as when a
  queue forms.
  Cost: ZSCORE, ZREM of the member or of the token's slot (+ ZREMRANGEBYSCORE and ZRANGE of the head, and per dead
  head a ZREM and a ZRANGE), or when the queue lost it ZCOUNT of the registrations within `to`'s lifetime, ZADD, PTTL
  (+ PEXPIRE, as an enqueue's), the grant loop; at the head, ZRANGE of the slots and one PUBLISH per holding instance.
]]

--- @include "redisNow"
--- @include "queue"
local from, to = ARGV[1], ARGV[2]
local notify, channelId = ARGV[5], ARGV[6]
local _, _, liveMs = splitMember(to)
-- An arrival just ahead of the oldest live waiter (the dead ones before it go: `to` must not stand behind them, or
-- take a dead arrival and be dropped with them by the grant loop below).
local function atHead()
  dropExpiredWaiters(KEYS[2])
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if not head[2] then
      return redisNowUs()
    end
    if not ranOut(head[1], head[2]) then
      -- 1 µs ahead, but never on `to`'s cutoff (a head 1 µs past it: the two tie, ordered by member)
      return math.max(tonumber(head[2]) - 1, cutoffUs(liveMs) + 1)
    end
    redis.call('ZREM', KEYS[2], head[1])
  end
end
local arrival = redis.call('ZSCORE', KEYS[2], from)
if arrival then
  redis.call('ZREM', KEYS[2], from)
  if ranOut(to, arrival) then
    arrival = atHead()
  end
elseif redis.call('ZREM', KEYS[1], (splitMember(from))) == 1 then
  arrival = atHead() -- at the head again
else
  -- bounded as an enqueue is (enqueueWaiter-n.lua)
  if redis.call('ZCOUNT', KEYS[2], '(' .. deadCutoff(liveMs), '+inf') >= tonumber(ARGV[7]) then
    return 0
  end
  arrival = redisNowUs()
end
redis.call('ZADD', KEYS[2], string.format('%d', arrival), to)
-- extended as an enqueue extends it (enqueueWaiter-n.lua)
extendQueue(KEYS[2], liveMs)
local granted, head = grantFree(KEYS[1], KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), notify, channelId, to)
for _, g in ipairs(granted) do
  if g == to then
    return 2
  end
end
if head == to then
  tellHolders(KEYS[1], notify, channelId)
end
return 1
