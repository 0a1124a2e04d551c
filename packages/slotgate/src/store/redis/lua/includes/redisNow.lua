-- The Redis clock in milliseconds, read at most once per script call.
local nowMs = nil
local function redisNow()
  if not nowMs then
    local t = redis.call('TIME')
    nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return nowMs
end
