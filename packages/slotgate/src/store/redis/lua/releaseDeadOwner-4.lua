--[[
  releaseDeadOwner: releases the slots `slotgate doctor` reported as held by an instance whose heartbeat stopped, each
  only while its lease still has the expiry reported (a renewal since then means its owner is alive: it stays), and
  passes the freed slots to the channel's oldest live waiters as a release does (grantFree, includes/queue.lua).

  KEYS[1..4]  slots, queue, peak and limit keys (see enqueueWaiter-n.lua)
  ARGV[1..5]  claim deadline ms, lease TTL ms, grants channel prefix, channel id, adaptive floor or '' (as in
              releaseSlot-4.lua)
  ARGV[6..]   pairs: a lease token, then the expiry score reported for it

  Returns the number of slots released.
  Cost: per pair ZSCORE (+ ZREM, and for a slot released ZCARD and the high-water mark); when one was released, the
  grant loop of releaseSlot-4.lua.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local released = 0
for i = 6, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    released = released + removeSlot(KEYS[1], KEYS[3], ARGV[i])
  end
end
if released > 0 then
  grantFree(channelOf(0, 1), nil)
end
return released
