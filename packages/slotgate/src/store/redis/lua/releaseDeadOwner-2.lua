--[[
  releaseDeadOwner: releases the slots `slotgate doctor` reported as held by an instance whose heartbeat stopped, each
  only while its lease still has the expiry reported (a renewal since then means its owner is alive: it stays), and
  passes the freed slots to the channel's oldest live waiters as a release does (grantFree, lua/includes/queue.lua).

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[2]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[3]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[4]     the channel id, as messages name it
  ARGV[5..]   pairs: a lease token, then the expiry score reported for it

  Returns the number of slots released.
  Cost: per pair ZSCORE (+ ZREM); when one was released, the grant loop of releaseSlot-2.lua.
]]
--- @include "redisNow"
--- @include "queue"
local released = 0
for i = 5, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    released = released + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
if released > 0 then
  grantFree(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], nil, '')
end
return released
