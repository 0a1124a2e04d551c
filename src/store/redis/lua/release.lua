--[[
  release: remove several lease tokens in one call (the releases of one event-loop tick, coalesced by the store;
  a single release is a plain ZREM).

  KEYS[1..n]  distinct slots keys
  ARGV[2k-1]  index into KEYS (1-based) of release k
  ARGV[2k]    token of release k

  Returns one 1/0 per release: 1 when the token was there. Cost: ZREM per release.
]]
local removed = {}
for j = 1, #ARGV, 2 do
  removed[#removed + 1] = redis.call('ZREM', KEYS[tonumber(ARGV[j])], ARGV[j + 1])
end
return removed
