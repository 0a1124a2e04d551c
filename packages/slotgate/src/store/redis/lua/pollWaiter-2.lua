--[[
  pollWaiter: a waiter's slow safety check (for a lost message or a Redis that restarted): grants what is free to the
  oldest waiters, then says where this waiter stands.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<token>"
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     how long a waiter's registration lives past its arrival, in ms (includes/queue.lua)

  Returns 2 = the token holds a grant (claim it), 1 = still queued, 0 = neither (the queue lost it: enqueue again).
  Cost: the grant loop (a ZRANGE alone when the queue is empty; it drops the registrations that ran out, this one's
  too), ZSCORE of the token's slot, ZSCORE of the member.
]]
--- @include "redisNow"
--- @include "queue"
local member = ARGV[1]
local token = string.sub(member, string.find(member, '|', 1, true) + 1)
grantFree(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], member, tonumber(ARGV[6]))
if redis.call('ZSCORE', KEYS[1], token) then
  return 2
end
-- still queued: the grant loop above dropped every registration that ran out (the keys outlive registrations: they
-- are extended ahead)
if redis.call('ZSCORE', KEYS[2], member) then
  return 1
end
return 0
