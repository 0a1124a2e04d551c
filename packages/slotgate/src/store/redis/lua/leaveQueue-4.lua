--[[
  leaveQueue: a waiter that is no longer queued gives back the grant it was given here and will not claim; the slot
  passes to the next waiter in the same call. The store takes a queued waiter out with a plain ZREM first (a grant
  takes its member out of the queue in the same script, so a member still there was granted nothing) and calls this
  only when that ZREM found nothing.

  KEYS[1..4]  slots, queue, peak and limit keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2..6]  claim deadline ms, lease TTL ms, grants channel prefix, channel id, adaptive floor or '' (as in
              releaseSlot-4.lua)

  Returns 1 when a grant was given back, 0 otherwise.
  Cost: ZREM of the member; when it was no longer queued, ZREM of the token's slot, and when it held one, ZCARD, TIME,
  the high-water mark and the grant loop.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local member = ARGV[1]
local token = splitMember(member)
-- a member still queued was granted nothing here (a grant takes it out of the queue in the same script)
local returned = 0
if redis.call('ZREM', KEYS[2], member) == 0 then
  returned = removeSlot(KEYS[1], KEYS[3], token)
end
if returned == 1 then
  grantFree(channelOf(0, 2), nil)
end
return returned
