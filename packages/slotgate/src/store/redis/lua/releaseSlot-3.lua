--[[
  releaseSlot: gives a slot back. The slot goes to the channel's oldest live waiter (a grant), never to whoever asks
  next; with nobody waiting it is simply free.

  KEYS[1]  slots key (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[2]  queue key (see enqueueWaiter-n.lua)
  KEYS[3]  peak key (hash: the channel's high-water mark, includes/peak.lua)
  ARGV[1]  the lease token
  ARGV[2]  claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]  lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]  grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]  the channel id, as messages name it
  ARGV[6]  the releasing instance's id, or '': a waiter of its own is granted a full lease, named in the reply
           instead of a message, and needs no claim

  Returns { 1 when the token held a slot else 0, 1 when live waiters are left else 0, then the tokens of the
  releasing instance's waiters granted }.
  Cost: ZREM; when it held a slot, ZCARD, TIME and the high-water mark (HMGET, + HSET at a new peak, + PEXPIRE at a
  minute's first); ZRANGE of the oldest waiters; with waiters, ZCARD, per grant ZADD, ZREM and PUBLISH, and once PTTL
  (+ PEXPIRE); a ZREMRANGEBYSCORE when the slots look full.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "queue"
local removed = removeSlot(KEYS[1], KEYS[3], ARGV[1])
local granted, head = grantFree(channelOf(0, 2), nil, ARGV[6])
local reply = { removed, head and 1 or 0 }
if ARGV[6] ~= '' then
  for _, member in ipairs(granted) do
    local token = splitMember(member)
    if instanceOf(token) == ARGV[6] then
      reply[#reply + 1] = token
    end
  end
end
return reply
