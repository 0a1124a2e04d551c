--[[
  releaseDeadOwner: releases the slots `slotgate doctor` reported as held by an instance whose heartbeat stopped, each
  only while its lease still has the expiry reported (a renewal since then means its owner is alive: it stays), and
  passes the freed slots to the channel's oldest live waiters as a release does (grantFree, includes/queue.lua).

  KEYS[1..3]  slots, queue and peak keys (see enqueueWaiter-n.lua)
  ARGV[1..4]  claim deadline ms, lease TTL ms, grants channel prefix, channel id (as in releaseSlot-3.lua)
  ARGV[5..]   pairs: a lease token, then the expiry score reported for it

  Returns the number of slots released.
  Cost: per pair ZSCORE (+ ZREM, and for a slot released ZCARD and the high-water mark); when one was released, the
  grant loop of releaseSlot-3.lua.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "queue"
local released = 0
for i = 5, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    released = released + removeSlot(KEYS[1], KEYS[3], ARGV[i])
  end
end
if released > 0 then
  grantFree(channelOf(0, 1), nil)
end
return released
