--[[
  pollWaiter: a waiter's slow safety check (for a lost message or a Redis that restarted): grants what is free to the
  oldest waiters (unless ARGV[6] is "0"), then says where this waiter stands.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the member "<max>|<live>|<token>"
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     "0" for a look at this waiter alone, with no grant loop: a poll of its store ran one on the channel within
              the last second (queues.ts, SWEEP_EVERY_MS); otherwise (or absent) the grant loop runs first
  ARGV[7]     now in ms on the Redis clock by the caller's estimate, never earlier than Redis's own (grants are scored
              and registrations' lifetimes judged by it, this waiter's too), or '' (or absent) to read TIME

  Returns 2 = the token holds a grant (claim it), 1 = still queued, 0 = neither (the queue lost it: enqueue again).
  Cost: the grant loop unless ARGV[6] is "0" (a ZRANGE alone when the queue is empty; on a full channel ZRANGE, ZCARD,
  TIME and the ZREMRANGEBYSCORE of expired leases; per grant ZADD, ZREM, PUBLISH, and PTTL (+ PEXPIRE) once), ZSCORE
  of the token's slot, ZSCORE of the member (+ ZREM when its registration ran out), and TIME when the caller gave no
  estimate of the clock and the call read none.
]]
--- @include "redisNow"
--- @include "queue"
useGivenNow(tonumber(ARGV[7]))
local member = ARGV[1]
local token = splitMember(member)
if ARGV[6] ~= '0' then
  grantFree(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], member)
end
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
