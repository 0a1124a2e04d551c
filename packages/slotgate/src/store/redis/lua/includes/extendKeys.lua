-- Extends every key of the set `touched` (key → true) to at least `ttl` ms: PTTL, and PEXPIRE only when it extends.
-- A slots key never expires before the leases it holds.
local function extendKeys(touched, ttl)
  for key in pairs(touched) do
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
  end
end
