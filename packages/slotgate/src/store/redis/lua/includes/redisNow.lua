-- The Redis clock, read at most once per script call: redisNow() in milliseconds, redisNowUs() in microseconds. A
-- script given the caller's upper bound of the clock (useGivenNow: never earlier than Redis's own, RedisClock.upperNow)
-- takes it for redisNow(), which scores leases and grants and judges registrations' lifetimes, and reads no TIME for
-- them. leaseNow() always reads TIME: whether a lease ran out (a sweep) is judged by Redis's own clock only.
local nowMs, nowUs = nil, nil
local givenMs = nil
local function readClock()
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function useGivenNow(ms)
  givenMs = ms
end
local function redisNow()
  if givenMs then
    return givenMs
  end
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
local function leaseNow()
  if not nowMs then
    readClock()
  end
  return nowMs
end
