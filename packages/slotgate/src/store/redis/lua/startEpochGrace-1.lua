--[[
  startEpochGrace: on Redis Cluster, starts the grace of an epoch a check made on one master (checkEpoch-1.lua in its
  Cluster mode), once a check has reached every master: from now on every instance sees it.

  KEYS[1]  the epoch key: "<id>|<created at, Redis ms; empty until the grace starts>|<kind>|<run_id>"
  ARGV[1]  the epoch id the check found

  The key keeps its value when it holds another epoch (made since) or a started one.
  Returns { epoch value or false when the key is gone, Redis time in ms }.
  Cost: TIME, GET (+ SET when it starts the grace).
]]
--- @include "redisNow"
local now = redisNow()
local value = redis.call('GET', KEYS[1])
if value then
  local id, madeAt, rest = string.match(value, '^([^|]*)|([^|]*)|(.*)$')
  if id == ARGV[1] and madeAt == '' then
    value = id .. '|' .. now .. '|' .. rest
    redis.call('SET', KEYS[1], value)
  end
end
return { value or false, now }
