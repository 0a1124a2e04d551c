--[[
  requeueWaiter: move a waiter's registration to a new member (a new token and the channel's new max, after its
  configuration changed) without losing its place in the channel's FIFO queue.
  - `from` is queued: `to` takes its arrival time;
  - `from` holds a grant it has not claimed (it was the head when granted): the grant is given back, and `to` stands
    at the head again;
  - neither (the queue lost it): `to` joins at the tail, as an enqueue does, unless the queue is full.
  Then the free slots are granted to the oldest waiters, each under its own max, `to` included (no message for it).
  A grant made to `from` is gone for good: its token is in neither the queue nor the slots any more.

  KEYS[1..3]  slots, waiters and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<token>" of `from`
  ARGV[2]     the member "<max>|<token>" of `to`
  ARGV[3]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[4]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[5]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[6]     the channel id, as messages name it
  ARGV[7]     max waiting (>= 1), for a waiter the queue lost
  ARGV[8]     registration TTL in ms (the wait deadline plus a margin)
  ARGV[9]     the keys' TTL basis in ms, as enqueueWaiter's ARGV[9] (absent: ARGV[8])

  Returns 2 = `to` holds a slot at once (claim it), 1 = queued, 0 = queue full (the queue had lost `from`).
  When `to` is left at the head, every instance holding a slot of the channel is told ("q\n<channel>"), as when a
  queue forms.
  Cost: ZSCORE, 2 ZREM or ZREM of the token's slot (+ ZRANGE of the head), 2 ZADD, PTTL (+ 2 PEXPIRE when the keys have less than 1.5 times their TTL basis left), the grant loop;
  at the head, ZRANGE of the slots and one PUBLISH per holding instance.
]]
--- @include "redisNow"
--- @include "queue"
local from, to = ARGV[1], ARGV[2]
local notify, channelId = ARGV[5], ARGV[6]
local ttl = tonumber(ARGV[8])
local arrival = redis.call('ZSCORE', KEYS[3], from)
if arrival then
  redis.call('ZREM', KEYS[3], from)
  redis.call('ZREM', KEYS[2], from)
elseif redis.call('ZREM', KEYS[1], (splitMember(from))) == 1 then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  arrival = head[2] and (tonumber(head[2]) - 1) or redisNowUs()
else
  local n = redis.call('ZCARD', KEYS[3])
  if n >= tonumber(ARGV[7]) then
    n = n - dropExpiredWaiters(KEYS[2], KEYS[3])
    if n >= tonumber(ARGV[7]) then
      return 0
    end
  end
  arrival = redisNowUs()
end
redis.call('ZADD', KEYS[3], arrival, to)
redis.call('ZADD', KEYS[2], redisNow() + ttl, to)
-- extended as an enqueue extends them (enqueueWaiter-n.lua): to twice the keys' TTL basis when below 1.5 times it
local keyTtl = math.max(ttl, tonumber(ARGV[9]) or 0)
if redis.call('PTTL', KEYS[2]) < keyTtl + math.floor(keyTtl / 2) then
  redis.call('PEXPIRE', KEYS[2], 2 * keyTtl)
  redis.call('PEXPIRE', KEYS[3], 2 * keyTtl)
end
local granted, head = grantFree(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), tonumber(ARGV[4]), notify, channelId, to)
for _, g in ipairs(granted) do
  if g == to then
    return 2
  end
end
if head == to then
  tellHolders(KEYS[1], notify, channelId)
end
return 1
