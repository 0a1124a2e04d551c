--[[
  releaseSlot: give a slot back on a channel that may have waiters: the slot goes to the oldest live waiter (a grant,
  told to its instance), never to whoever asks next. A release on a channel without a queue is a plain ZREM instead.

  KEYS[1..2]  slots and queue keys (see enqueueWaiter-n.lua)
  ARGV[1]     the lease token
  ARGV[2]     claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]     lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]     grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]     the channel id, as messages name it
  ARGV[6]     the releasing instance's id ('' for none): a waiter of its own is granted a full lease, named in the
              reply instead of told by a message, and needs no claim
  ARGV[7]     "1" when the caller's store had the slots key's expiry checked within TTL/4 (queues.ts): a grant then
              skips the PTTL unless the key was empty; otherwise (or absent) it checks
  ARGV[8]     now in ms on the Redis clock by the caller's estimate, never earlier than Redis's own (grants are scored
              and registrations' lifetimes judged by it), or '' (or absent) to read TIME

  Returns { 1 when the token held a slot, 0 when it did not (released before, or expired), flags: 1 when a grant
  checked the slots key's expiry (it then has at least a lease TTL), + 2 when no live waiter is left in the queue
  (whatever the lifetimes of the registrations: each is judged by its own), then the tokens of the releasing
  instance's waiters granted here }.
  Cost: ZREM, ZRANGE of the 64 oldest waiters (all when the queue is empty); with a queue, ZCARD and TIME (no TIME
  when the caller gave its estimate of the clock, unless the call sweeps expired leases), per grant ZADD, ZREM and
  PUBLISH, per dead waiter reached a ZREM, and once per call PTTL (+ PEXPIRE) unless ARGV[7] says the key's expiry is
  known, a ZREMRANGEBYSCORE (+ a ZRANGE) when the oldest is older than the longest lifetime, a ZRANGE per 64 waiters,
  a ZREMRANGEBYSCORE when the slots look full before any grant (none after one: the freed slot filled the channel),
  and a ZRANGEBYSCORE of the live slots when the waiters are of several clients (the fair share).
]]
--- @include "redisNow"
--- @include "queue"
useGivenNow(tonumber(ARGV[8]))
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local granted, head, checked = grantFree(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5],
  nil, ARGV[6], ARGV[7] == '1')
local reply = { removed, (checked and 1 or 0) + (head == nil and 2 or 0) }
if ARGV[6] ~= '' then
  for _, member in ipairs(granted) do
    local token = splitMember(member)
    if instanceOf(token) == ARGV[6] then
      reply[#reply + 1] = token
    end
  end
end
return reply
