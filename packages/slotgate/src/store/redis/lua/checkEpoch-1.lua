--[[
  checkEpoch: read the store's epoch, and make a new one when the Redis answering is not the one that recorded it.

  KEYS[1]  the epoch key: "<id>|<created at, Redis ms; empty until its grace starts>|<kind>|<run_id>"
  ARGV[1]  a fresh epoch id, used only when this call makes a new epoch
  ARGV[2]  the kind of an epoch made because the key is missing: "start" (the caller knew no epoch) or "restart"
  ARGV[3]  "1" on Redis Cluster: an epoch this call makes has no creation time yet; its grace starts once a check
           reaches every master (startEpochGrace-1.lua), so a grace cannot run out while some master still refuses

  The run_id (INFO server) is new for every redis-server process. A key recorded by another process means this Redis
  took over without every write (a replica promoted by a failover, or a restart from a persistence file): a new
  epoch of kind "failover", which every instance treats like a restart. A key without a run_id gets this one.

  Returns { epoch value, Redis time in ms }.
  Cost: INFO, TIME, GET (+ SET when it makes or completes an epoch). Once per connection, not per admission.
]]
--- @include "redisNow"
local info = redis.call('INFO', 'server')
local runId = string.match(info, 'run_id:(%w+)') or '?'
local now = redisNow()
local createdAt = ARGV[3] == '1' and '' or now
local value = redis.call('GET', KEYS[1])
if not value then
  value = ARGV[1] .. '|' .. createdAt .. '|' .. ARGV[2] .. '|' .. runId
  redis.call('SET', KEYS[1], value)
else
  local id, madeAt, kind, recorded = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|?([^|]*)$')
  if not id then
    value = ARGV[1] .. '|' .. createdAt .. '|failover|' .. runId
    redis.call('SET', KEYS[1], value)
  elseif recorded == '' then
    value = id .. '|' .. madeAt .. '|' .. kind .. '|' .. runId
    redis.call('SET', KEYS[1], value)
  elseif recorded ~= runId then
    value = ARGV[1] .. '|' .. createdAt .. '|failover|' .. runId
    redis.call('SET', KEYS[1], value)
  end
end
return { value, now }
