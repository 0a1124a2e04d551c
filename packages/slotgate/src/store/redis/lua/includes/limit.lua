-- A channel's adaptive limit: the law of core/adaptive.ts (nextLimit), step for step, on the hash kept beside the
-- channel's slots. Fields: l = the limit (3 decimals); w, wb = the decrease window's start (Redis ms) and the limit
-- then; f = the slots in flight at the last overload (0: none to probe), k = successes since; d = when the latency last
-- lowered it; mb = the latency bucket (ms ÷ LATENCY_BUCKET_MS), m = its least first-byte time, mp = the bucket
-- before's; x = the minute its expiry was last pushed back. Needs redisNow.

-- core/adaptive.ts: LIMIT_WINDOW_MS, LATENCY_BUCKET_MS, LIMIT_KEY_TTL_MS, LATENCY_STEP.
local LIMIT_WINDOW_MS = 500
local LATENCY_BUCKET_MS = 30000
local LIMIT_KEY_TTL_MS = 3600000
local LATENCY_STEP = 0.8

-- A floor argument: nil when no adaptive limit applies (''), else the floor; -1 (a caller that cannot tell) reads as 1,
-- so the stored limit caps its grants when there is one.
local function limitFloor(arg)
  local floor = tonumber(arg)
  if floor == -1 then
    return 1
  end
  return floor
end

-- The limit in force on a channel whose floor is `floor`: the whole part of the stored limit, at least the floor; nil
-- when none is stored (the channel's max applies). Cost: HGET.
local function limitCap(limitKey, floor)
  local l = tonumber(redis.call('HGET', limitKey, 'l'))
  if not l then
    return nil
  end
  return math.max(floor, math.floor(l))
end

local function round3(n)
  return math.floor(n * 1000 + 0.5) / 1000
end

local function minOf(a, b)
  if a == nil then
    return b
  end
  if b == nil then
    return a
  end
  return math.min(a, b)
end

-- Applies one report; returns the limit after it. `report` = "<ok|over>|<ceiling>|<floor>|<probe after>|<tolerance>|<first byte ms or ''>|<held ms>";
-- `inFlight`: the slots in use just before this release, this one included; `hasDemand()`: whether requests wait.
-- Cost: HMGET; HSET of the fields that changed, if any (+ PEXPIRE in a new minute); EXISTS of the queue when it may
-- raise the limit (below the ceiling, every slot in use).
local function reportLimit(limitKey, report, inFlight, hasDemand)
  local kind, ceil, flo, probeAfter, tolerance, firstByte, held =
    string.match(report, '^(%a+)|(%d+)|(%d+)|(%d+)|([%d.]+)|(%d*)|(%d+)$')
  if not kind then
    return
  end
  local ceiling = tonumber(ceil)
  local floor = math.max(1, math.min(tonumber(flo), ceiling))
  probeAfter, tolerance, held = tonumber(probeAfter), tonumber(tolerance), tonumber(held)
  firstByte = tonumber(firstByte)
  local now = redisNow()
  local v = redis.call('HMGET', limitKey, 'l', 'w', 'wb', 'f', 'k', 'd', 'mb', 'm', 'mp', 'x')
  local limit = tonumber(v[1]) or ceiling
  local windowAt, windowBase = tonumber(v[2]) or 0, tonumber(v[3]) or ceiling
  local failed, successes, slowedAt = tonumber(v[4]) or 0, tonumber(v[5]) or 0, tonumber(v[6]) or 0
  local bucket, least, leastBefore = tonumber(v[7]) or 0, tonumber(v[8]), tonumber(v[9])
  limit = math.max(floor, math.min(ceiling, limit))

  local nowBucket = math.floor(now / LATENCY_BUCKET_MS)
  if bucket ~= nowBucket then
    leastBefore = bucket == nowBucket - 1 and least or nil
    least = nil
    bucket = nowBucket
  end
  local baseline = minOf(least, leastBefore)

  local measured = nil
  if kind == 'over' then
    measured = inFlight - 1
  elseif firstByte and firstByte >= 0 then
    local slow = tolerance > 0 and baseline ~= nil and baseline > 0 and firstByte > tolerance * baseline
    if slow and now - held >= slowedAt then
      measured = math.max(inFlight * baseline / firstByte, LATENCY_STEP * limit)
      slowedAt = now
    end
    least = minOf(least, firstByte)
  end

  if measured ~= nil then
    if now - windowAt >= LIMIT_WINDOW_MS then
      windowAt = now
      windowBase = limit
      failed = inFlight
    else
      failed = failed > 0 and math.min(failed, inFlight) or inFlight
    end
    successes = 0
    limit = math.min(limit, math.max(floor, windowBase / 4, measured))
  elseif kind == 'ok' and limit < ceiling and inFlight >= math.floor(limit) and hasDemand() then
    successes = successes + 1
    if failed > 0 and inFlight >= failed then
      failed = 0
    end
    local nextL = limit + 1 / math.floor(limit)
    if failed > 0 and math.floor(nextL) >= failed and successes < probeAfter then
      nextL = math.min(nextL, failed - 0.001)
    end
    limit = math.max(limit, math.min(ceiling, nextL))
  end
  limit = round3(limit)

  local minute = math.floor(now / 60000)
  -- in the order of the HMGET above; written only when one changed (a steady limit costs no write)
  local values = { string.format('%.3f', limit), string.format('%d', windowAt), string.format('%.3f', windowBase),
    string.format('%d', failed), string.format('%d', successes), string.format('%d', slowedAt),
    string.format('%d', bucket), least and string.format('%d', least) or '',
    leastBefore and string.format('%d', leastBefore) or '', string.format('%d', minute) }
  local names = { 'l', 'w', 'wb', 'f', 'k', 'd', 'mb', 'm', 'mp', 'x' }
  local fields = {}
  for i = 1, #names do
    if v[i] ~= values[i] then
      fields[#fields + 1], fields[#fields + 2] = names[i], values[i]
    end
  end
  if #fields > 0 then
    redis.call('HSET', limitKey, unpack(fields))
  end
  if tonumber(v[10]) ~= minute then
    redis.call('PEXPIRE', limitKey, LIMIT_KEY_TTL_MS)
  end
  return limit
end
