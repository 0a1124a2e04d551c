--[[
  reclaimLeases: take back leases the store lost (Redis restarted empty, a lease expired during a stall).

  KEYS[1..n]  distinct slots keys of the batch
  ARGV[1]     lease TTL in ms
  ARGV[2]     1 = restore: every lease whatever the channel's load (requests in flight when the store lost them);
              0 = reclaim: a lease still there is renewed, a missing one taken back only into a free slot
  ARGV[3k]    index into KEYS (1-based) of lease k
  ARGV[3k+1]  token of lease k
  ARGV[3k+2]  the channel's max concurrency for lease k

  Returns the positions k (1-based) of the leases not held: those are lost for good.
  Cost: TIME, then per lease ZADD (+ ZSCORE, ZCOUNT when reclaiming a missing one), PTTL (+ PEXPIRE) per key.
]]
--- @include "redisNow"
--- @include "extendKeys"
local now = redisNow()
local ttl = tonumber(ARGV[1])
local restore = ARGV[2] == '1'
local lost = {}
local touched = {}
local k = 0
for j = 3, #ARGV, 3 do
  k = k + 1
  local key = KEYS[tonumber(ARGV[j])]
  local token = ARGV[j + 1]
  local held = restore or redis.call('ZSCORE', key, token)
  if not held and redis.call('ZCOUNT', key, '(' .. now, '+inf') < tonumber(ARGV[j + 2]) then
    held = true
  end
  if held then
    redis.call('ZADD', key, now + ttl, token)
    touched[key] = true
  else
    lost[#lost + 1] = k
  end
end
extendKeys(touched, ttl)
return lost
