-- A channel's high-water mark: the most slots it held at once, per minute of the Redis clock. Every script that takes
-- slots out (a release, a grant given back, a sweep of expired leases, a dead owner's release) notes the count just
-- before: between two such moments the count only rises, so the most held over any stretch of time is the greatest of
-- the counts noted in it and the count at its end (readPeaks-n.lua). Slots held since before a minute began are
-- noted by the first removal in it. Hash: b = the minute (Redis ms ÷ PEAK_MINUTE_MS), p = the peak of that minute,
-- q = the peak of the minute before (0 when nothing was noted then). Needs redisNow.

-- store/peak.ts, PEAK_MINUTE_MS.
local PEAK_MINUTE_MS = 60000

-- Notes that the channel holds `held` slots now. Cost: HMGET; HSET when it is a new peak; in a new minute, PEXPIRE
-- to two minutes, so the key outlives the minute after its last note and goes when the channel is idle.
local function notePeak(peakKey, held)
  local minute = math.floor(redisNow() / PEAK_MINUTE_MS)
  local noted = redis.call('HMGET', peakKey, 'b', 'p')
  local b, p = tonumber(noted[1]), tonumber(noted[2]) or 0
  if b == minute then
    if held > p then
      redis.call('HSET', peakKey, 'p', held)
    end
  else
    redis.call('HSET', peakKey, 'b', minute, 'p', held, 'q', b == minute - 1 and p or 0)
    redis.call('PEXPIRE', peakKey, 2 * PEAK_MINUTE_MS)
  end
end
