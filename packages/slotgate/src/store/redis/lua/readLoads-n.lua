--[[
  readLoads: the live loads of a batch of channels (at most 50; on Cluster one channel), read-only: the direct reads
  of `load_cache_enabled: false` and of the operators' views.

  KEYS[3c-2]  slots key of channel c     (sorted set: member = lease token, score = expiry ms on the Redis clock)
  KEYS[3c-1]  queue key of channel c     (see enqueueWaiter-n.lua)
  KEYS[3c]    cooldown key of channel c  (string; exists while the channel cools down)
  ARGV[1]     how long a registration lives past its arrival, ms (the reader's own: one of another lifetime is counted
              a little longer or shorter than it lives)

  Returns per channel c, flat: live leases, live registrations, the cooldown's PTTL (-2: none, -1: no expiry).
  Cost: TIME, then per channel ZCOUNT, ZCOUNT and PTTL.
]]
--- @include "redisNow"
local leasesFrom = '(' .. redisNow()
local arrivedAfter = '(' .. string.format('%d', (redisNow() - tonumber(ARGV[1])) * 1000)
local reply = {}
for c = 1, #KEYS / 3 do
  reply[#reply + 1] = redis.call('ZCOUNT', KEYS[3 * c - 2], leasesFrom, '+inf')
  reply[#reply + 1] = redis.call('ZCOUNT', KEYS[3 * c - 1], arrivedAfter, '+inf')
  reply[#reply + 1] = redis.call('PTTL', KEYS[3 * c])
end
return reply
