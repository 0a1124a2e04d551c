--[[
  pollWaiter: a waiter's slow safety check, for a lost message or a Redis that lost the queue: grants what is free to
  the oldest waiters, then says where this waiter stands.

  KEYS[1..4]  slots, queue, peak and limit keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2..6]  claim deadline ms, lease TTL ms, grants channel prefix, channel id, adaptive floor or '' (as in
              releaseSlot-4.lua)

  Returns 2 = the token holds a grant (claim it), 1 = still queued, 0 = neither (the queue lost it: enqueue again).
  Cost: the grant loop (see releaseSlot-4.lua), ZSCORE of the token's slot, ZSCORE of the member (+ ZREM when its
  registration ran out).
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local member = ARGV[1]
local token = splitMember(member)
grantFree(channelOf(0, 2), member)
if redis.call('ZSCORE', KEYS[1], token) then
  return 2
end
local arrival = redis.call('ZSCORE', KEYS[2], member)
if not arrival then
  return 0
end
if ranOut(member, arrival) then
  redis.call('ZREM', KEYS[2], member)
  return 0
end
return 1
