-- The Redis clock, read at most once per script call: redisNow() in milliseconds, redisNowUs() in microseconds.
-- Leases are scored, lifetimes judged and expired members swept by this clock only, never by a caller's.
local nowMs, nowUs = nil, nil
local function readClock()
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function redisNow()
  if not nowMs then
    readClock()
  end
  return nowMs
end
local function redisNowUs()
  if not nowUs then
    readClock()
  end
  return nowUs
end
