--[[
  leaveQueue: a waiter gives up its place (time-out, abort, or a grant on another of its channels). A grant it was
  given here and will not claim is given back in the same call and passes to the next waiter.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     "1" when the waiter gives up (time-out, abort): it also sweeps leases that ran out; "0" when it leaves
              because it was granted on another channel (a plain leave, the common one under overload)

  Returns 1 when a grant was given back, 0 otherwise.
  Cost: ZREM; when the member was no longer queued (granted here, or dropped as expired), ZREM of the token's slot,
  and when it held one, the grant loop (a ZRANGE alone when nobody waits).
  Otherwise, when it gives up, ZCARD, and when the slots in use reach the leaver's max, TIME and one sweep of expired
  leases: a lease whose holder died or was cut off frees its slot here too, not only at a waiter's safety poll
  (waiters that time out before their first poll would otherwise never see it), and the grant loop runs when the
  sweep freed one.
]]
--- @include "redisNow"
--- @include "queue"
local member = ARGV[1]
local token, max = splitMember(member)
-- a member still queued was granted nothing here (a grant takes it out of the queue in the same script): no slot to
-- give back
local queued = redis.call('ZREM', KEYS[2], member)
local returned = 0
if queued == 0 then
  returned = redis.call('ZREM', KEYS[1], token)
end
local freed = returned == 1
if not freed and ARGV[6] ~= '0' and max > 0 and redis.call('ZCARD', KEYS[1]) >= max then
  freed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', leaseNow()) > 0
end
if freed then
  grantFree(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], nil)
end
return returned
