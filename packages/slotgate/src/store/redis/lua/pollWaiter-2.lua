--[[
  pollWaiter: a waiter's slow safety check (for a lost message or a Redis that restarted): grants what is free to the
  oldest waiters, then says where this waiter stands.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it

  Returns 2 = the token holds a grant (claim it), 1 = still queued, 0 = neither (the queue lost it: enqueue again).
  Cost: the grant loop (a ZRANGE alone when the queue is empty), ZSCORE of the token's slot, ZSCORE of the member
  (+ ZREM when its registration ran out).
]]
--- @include "redisNow"
--- @include "queue"
local member = ARGV[1]
local token = splitMember(member)
grantFree(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], member)
if redis.call('ZSCORE', KEYS[1], token) then
  return 2
end
-- still queued while its registration is live (the keys outlive registrations: they are extended ahead)
local arrival = redis.call('ZSCORE', KEYS[2], member)
if not arrival then
  return 0
end
if ranOut(member, arrival) then
  -- a registration that ran out goes, as one does anywhere
  redis.call('ZREM', KEYS[2], member)
  return 0
end
return 1
