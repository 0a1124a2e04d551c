--[[
  releaseSlot: gives a slot back. The slot goes to the channel's oldest live waiter (a grant), never to whoever asks
  next; with nobody waiting it is simply free.

  KEYS[1]  slots key (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[2]  queue key (see enqueueWaiter-n.lua)
  KEYS[3]  peak key (hash: the channel's high-water mark, includes/peak.lua)
  KEYS[4]  limit key (hash: the channel's adaptive limit, includes/limit.lua)
  ARGV[1]  the lease token
  ARGV[2]  claim deadline in ms (how long a grant waits for its instance to claim it)
  ARGV[3]  lease TTL in ms (a slots key keeps at least this much expiry)
  ARGV[4]  grants channel prefix (an instance's channel is this plus its id)
  ARGV[5]  the channel id, as messages name it
  ARGV[6]  the floor of the channel's adaptive limit when grants are made under it, else ''
  ARGV[7]  the releasing instance's id, or '': a waiter of its own is granted a full lease, named in the reply
           instead of a message, and needs no claim
  ARGV[8]  what the upstream said of the request the slot served, for the adaptive limit (reportLimit in
           includes/limit.lua), or ''

  Returns { 1 when the token held a slot else 0, 1 when live waiters are left else 0, the whole part of the adaptive
  limit after the report (0 without a report), then the tokens of the releasing instance's waiters granted }.
  Cost: ZREM; when it held a slot, ZCARD, TIME and the high-water mark (HMGET, + HSET at a new peak, + PEXPIRE at a
  minute's first); ZRANGE of the oldest waiters; with waiters, ZCARD, per grant ZADD, ZREM and PUBLISH, and once PTTL
  (+ PEXPIRE); a ZREMRANGEBYSCORE when the slots look full. With a report, its cost (includes/limit.lua); with a
  floor and no report, HGET of the limit once there are waiters.
]]
--- @include "redisNow"
--- @include "peak"
--- @include "limit"
--- @include "queue"
local ch = channelOf(0, 2)
local removed, inFlight = removeSlot(KEYS[1], KEYS[3], ARGV[1])
-- the report first: the grants below are made under the limit it leaves
local limit = nil
if removed == 1 and ARGV[8] ~= '' then
  limit = reportLimit(KEYS[4], ARGV[8], inFlight, function()
    return redis.call('EXISTS', KEYS[2]) == 1
  end)
  if ch.floor and limit then
    ch.cap = math.max(ch.floor, math.floor(limit))
  end
end
local granted, head = grantFree(ch, nil, ARGV[7])
local reply = { removed, head and 1 or 0, limit and math.floor(limit) or 0 }
if ARGV[7] ~= '' then
  for _, member in ipairs(granted) do
    local token = splitMember(member)
    if instanceOf(token) == ARGV[7] then
      reply[#reply + 1] = token
    end
  end
end
return reply
