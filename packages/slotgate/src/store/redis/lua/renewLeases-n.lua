--[[
  renewLeases: extend a batch of leases (at most 50) to now + TTL.

  KEYS[1..n]  distinct slots keys of the batch
  ARGV[1]     lease TTL in ms
  ARGV[2k]    index into KEYS (1-based) of lease k
  ARGV[2k+1]  token of lease k

  Returns the list of lease positions k (1-based) whose token was missing: those leases are lost.
  Only existing members are extended (ZADD XX), so a lost lease is never recreated.
  Cost: TIME, then ZADD XX CH per lease, PTTL (+ PEXPIRE when it extends) per key.
]]
--- @include "redisNow"
--- @include "extendKeys"
local now = redisNow()
local ttl = tonumber(ARGV[1])
local lost = {}
local touched = {}
local k = 0
for j = 2, #ARGV, 2 do
  k = k + 1
  local key = KEYS[tonumber(ARGV[j])]
  if redis.call('ZADD', key, 'XX', 'CH', now + ttl, ARGV[j + 1]) == 0 and not redis.call('ZSCORE', key, ARGV[j + 1]) then
    lost[#lost + 1] = k
  else
    touched[key] = true
  end
end
extendKeys(touched, ttl)
return lost
