--[[
  readPeaks: the high-water marks of a batch of channels (at most 50; on Cluster one channel), read-only.

  KEYS[2c-1]  slots key of channel c  (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[2c]    peak key of channel c   (hash, includes/peak.lua)

  Returns the Redis time in ms, then per channel c, flat: the most slots it held at once since the start of the
  previous minute (the greatest noted then and since, or its live leases now when more), and that start in ms.
  Cost: TIME, then per channel HMGET and ZCOUNT.
]]
--- @include "redisNow"
--- @include "peak"
local now = redisNow()
local minute = math.floor(now / PEAK_MINUTE_MS)
local reply = { now }
for c = 1, #KEYS / 2 do
  local noted = redis.call('HMGET', KEYS[2 * c], 'b', 'p', 'q')
  local b, p, q = tonumber(noted[1]), tonumber(noted[2]) or 0, tonumber(noted[3]) or 0
  local peak = b == minute and math.max(p, q) or b == minute - 1 and p or 0
  reply[#reply + 1] = math.max(peak, redis.call('ZCOUNT', KEYS[2 * c - 1], '(' .. now, '+inf'))
  reply[#reply + 1] = (minute - 1) * PEAK_MINUTE_MS
end
return reply
