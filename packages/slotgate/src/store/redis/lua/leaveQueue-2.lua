--[[
  leaveQueue: a waiter gives up its place (time-out, abort, or a grant on another of its channels). A grant it was
  given here and will not claim is given back in the same call and passes to the next waiter.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2..5]  claim deadline ms, lease TTL ms, grants channel prefix, channel id (as in releaseSlot-2.lua)
  ARGV[6]     "1" when the waiter gives up (time-out, abort): a full channel's expired leases are swept too, so a dead
              holder's slot passes on even when no waiter ever polls; "0" when it was granted elsewhere

  Returns 1 when a grant was given back, 0 otherwise.
  Cost: ZREM; when the member was no longer queued, ZREM of the token's slot and, when it held one, the grant loop;
  when it gives up, ZCARD, and on a full channel TIME and a ZREMRANGEBYSCORE (+ the grant loop when that freed one).
]]
--- @include "redisNow"
--- @include "queue"
local member = ARGV[1]
local token, max = splitMember(member)
-- a member still queued was granted nothing here (a grant takes it out of the queue in the same script)
local returned = 0
if redis.call('ZREM', KEYS[2], member) == 0 then
  returned = redis.call('ZREM', KEYS[1], token)
end
local freed = returned == 1
if not freed and ARGV[6] == '1' and max > 0 and redis.call('ZCARD', KEYS[1]) >= max then
  freed = sweepSlots(KEYS[1]) > 0
end
if freed then
  grantFree(channelOf(0, 2), nil)
end
return returned
