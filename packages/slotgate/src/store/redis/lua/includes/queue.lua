-- The wait queue of one channel: one sorted set, member = "<max>|<live>|<token>", score = arrival on the Redis clock in
-- µs (FIFO, within the fair share between clients). A registration lives <live> ms past its arrival: its waiter's
-- wait timeout plus a margin, at most MAX_LIVE_MS. Needs redisNow, peak and limit.

-- The longest a registration lives (store/redis/queues/members.ts, MAX_REGISTRATION_LIVE_MS).
local MAX_LIVE_MS = 62000
-- How many of the oldest waiters a grant chooses among (core/fair-share.ts, FAIR_WINDOW).
local FAIR_WINDOW = 64
-- Messages on an instance's grants channel (store/redis/queues/messages.ts): a slot granted to one of its waiters,
-- "c\n<claim deadline ms>\n<token>\n<channel>"; a queue formed on a channel where it holds a slot, "q\n<channel>".
local GRANT_MESSAGE = 'c'
local QUEUED_MESSAGE = 'q'

-- The arrival (µs) at or before which a registration living `liveMs` has run out, as a number and as a score string.
local function cutoffUs(liveMs)
  return (redisNow() - liveMs) * 1000
end
local function deadCutoff(liveMs)
  return string.format('%d', cutoffUs(liveMs))
end

-- Drops the registrations older than the longest lifetime (all run out). Returns how many went.
local function dropExpiredWaiters(queueKey)
  return redis.call('ZREMRANGEBYSCORE', queueKey, '-inf', deadCutoff(MAX_LIVE_MS))
end

-- The token of a member "<max>|<live>|<token>", its max, and its lifetime in ms (0 for another shape: run out).
local function splitMember(member)
  local a = string.find(member, '|', 1, true)
  local b = string.find(member, '|', a + 1, true)
  local live = b and tonumber(string.sub(member, a + 1, b - 1))
  if not live then
    return string.sub(member, a + 1), tonumber(string.sub(member, 1, a - 1)), 0
  end
  return string.sub(member, b + 1), tonumber(string.sub(member, 1, a - 1)), live
end

-- Extends the queue key to twice `liveMs` when it has less than 1.5 times it left (never shortens it), so the key
-- outlives every registration of that lifetime.
local function extendQueue(queueKey, liveMs)
  if redis.call('PTTL', queueKey) < liveMs + math.floor(liveMs / 2) then
    redis.call('PEXPIRE', queueKey, 2 * liveMs)
  end
end

-- Extends the slots key to 1.25 `ttl` when it has less than `ttl` left (never shortens it: a key outlives the leases
-- it holds), so a busy channel pays one PEXPIRE per quarter TTL.
local function extendSlots(slotsKey, ttl)
  if redis.call('PTTL', slotsKey) < ttl then
    redis.call('PEXPIRE', slotsKey, ttl + math.floor(ttl / 4))
  end
end

-- Whether the registration `member`, which arrived at `arrival` (µs), has run out.
local function ranOut(member, arrival)
  local _, _, live = splitMember(member)
  return tonumber(arrival) <= cutoffUs(live)
end

-- The instance id of a token "<instanceId>:<seq>".
local function instanceOf(token)
  return string.match(token, '^(.*):[^:]*$') or token
end

-- A token's client (as encoded) and weight: "<instanceId>:<seq>~<weight>~<client>" (core/ids.ts); '' and 1 without.
local function shareOf(token)
  local w, c = string.match(token, ':[^:~]*~([^~:]*)~([^:]*)$')
  if not w then
    return '', 1
  end
  local weight = tonumber(w)
  if not weight or weight <= 0 then
    weight = 1
  end
  return c, weight
end

-- Sweeps the slots whose leases ran out; returns how many went. When some went, the count before goes to the
-- channel's high-water mark.
local function sweepSlots(slotsKey, peakKey)
  local swept = redis.call('ZREMRANGEBYSCORE', slotsKey, '-inf', redisNow())
  if swept > 0 then
    notePeak(peakKey, redis.call('ZCARD', slotsKey) + swept)
  end
  return swept
end

-- Takes `token`'s slot out; returns 1 when it held one, and then the slots in use before (they go to the channel's
-- high-water mark).
local function removeSlot(slotsKey, peakKey, token)
  local removed = redis.call('ZREM', slotsKey, token)
  if removed == 1 then
    local before = redis.call('ZCARD', slotsKey) + 1
    notePeak(peakKey, before)
    return removed, before
  end
  return removed, nil
end

-- The channel a queue script works on: its slots, queue, peak and limit keys at KEYS[k + 1..k + 4], and the grant
-- parameters at ARGV[first..first + 4] (claim deadline ms, lease TTL ms, grants channel prefix, channel id, and the
-- floor of its adaptive limit: '' when none applies, -1 when the caller cannot tell and the stored limit, if any,
-- caps the grants).
local function channelOf(k, first)
  return {
    slots = KEYS[k + 1],
    queue = KEYS[k + 2],
    peak = KEYS[k + 3],
    limit = KEYS[k + 4],
    claimMs = tonumber(ARGV[first]),
    leaseTtl = tonumber(ARGV[first + 1]),
    notify = ARGV[first + 2],
    id = ARGV[first + 3],
    floor = limitFloor(ARGV[first + 4]),
  }
end

-- Grants the channel's free slots to its live waiters: the oldest first, within the fair share between clients, each
-- under its own max or the channel's adaptive limit when lower (includes/limit.lua, read once).
-- Among the oldest FAIR_WINDOW waiters, when they belong to more than one client, a slot goes to the waiter whose
-- client holds the fewest live slots relative to its weight (oldest first among equals); with one client's waiters
-- only, to the oldest. A pick that cannot be served under its own max leaves the choice to the oldest, and a waiter
-- asking under a lower max than the slots in use waits. A waiter whose registration ran out is dropped on the way.
-- A granted token holds its slot until the claim deadline, unless it is a waiter of `localInstance` (the instance
-- running this script): that one gets a full lease at once. Every other grant is told to its instance, but `quiet`'s
-- (the caller answers it directly). Expired leases are swept once, when they would keep a waiter out. Returns the
-- members granted and the oldest live member left waiting (nil when none).
local function grantFree(ch, quiet, localInstance)
  local cap, capRead = ch.cap, ch.cap ~= nil or not ch.floor
  local granted = {}
  local live, swept, extended, pruned = nil, false, false, false
  local grantedMax = nil -- the lowest max granted under in this call
  local held = nil -- live slots per client, read when the window is mixed
  local window, arrivals, gone, left, clients = {}, {}, {}, 0, nil
  while true do
    if left == 0 then
      gone = {}
      local raw = redis.call('ZRANGE', ch.queue, 0, FAIR_WINDOW - 1, 'WITHSCORES')
      if not pruned and raw[2] then
        pruned = true
        if tonumber(raw[2]) <= cutoffUs(MAX_LIVE_MS) and dropExpiredWaiters(ch.queue) > 0 then
          raw = redis.call('ZRANGE', ch.queue, 0, FAIR_WINDOW - 1, 'WITHSCORES')
        end
      end
      window, arrivals = {}, {}
      for i = 1, #raw, 2 do
        window[#window + 1] = raw[i]
        arrivals[#window] = raw[i + 1]
      end
      left = #window
      if left == 0 then
        return granted, nil
      end
      clients = nil
      if string.find(table.concat(window, '\n'), '~', 1, true) then
        clients = {}
        for i = 1, #window do
          clients[i] = shareOf((splitMember(window[i])))
        end
      end
    end
    local first = nil
    for i = 1, #window do
      if not gone[i] then
        first = i
        break
      end
    end
    live = live or redis.call('ZCARD', ch.slots)
    local pick = first
    local mixed = false
    if clients then
      for i = first + 1, #window do
        if not gone[i] and clients[i] ~= clients[first] then
          mixed = true
          break
        end
      end
    end
    if mixed then
      if not held then
        held = {}
        for _, t in ipairs(redis.call('ZRANGEBYSCORE', ch.slots, '(' .. redisNow(), '+inf')) do
          local c = shareOf(t)
          held[c] = (held[c] or 0) + 1
        end
      end
      local best = nil
      for i = first, #window do
        if not gone[i] then
          local c, w = shareOf((splitMember(window[i])))
          local rate = (held[c] or 0) / w
          if best == nil or rate < best then
            best, pick = rate, i
          end
        end
      end
    end
    local head = window[pick]
    local token, max = splitMember(head)
    if not capRead then
      cap, capRead = limitCap(ch.limit, ch.floor), true
    end
    if cap and cap < max then
      max = cap
    end
    -- not right after a grant under this max or a lower one: the freed slot it took filled the channel
    if live >= max and not swept and not (grantedMax and grantedMax <= max) then
      swept = true
      live = live - sweepSlots(ch.slots, ch.peak)
    end
    if live >= max and pick ~= first then
      pick = first
      head = window[pick]
      token, max = splitMember(head)
      if cap and cap < max then
        max = cap
      end
    end
    if ranOut(head, arrivals[pick]) then
      redis.call('ZREM', ch.queue, head)
      gone[pick], left = true, left - 1
    elseif live >= max then
      return granted, head
    else
      local instance = instanceOf(token)
      local mine = localInstance ~= nil and localInstance ~= '' and instance == localInstance
      redis.call('ZADD', ch.slots, redisNow() + (mine and ch.leaseTtl or ch.claimMs), token)
      if not extended then
        extended = true
        extendSlots(ch.slots, ch.leaseTtl)
      end
      redis.call('ZREM', ch.queue, head)
      gone[pick], left = true, left - 1
      live = live + 1
      if held then
        local c = shareOf(token)
        held[c] = (held[c] or 0) + 1
      end
      granted[#granted + 1] = head
      grantedMax = math.min(grantedMax or max, max)
      if head ~= quiet and not mine then
        redis.call('PUBLISH', ch.notify .. instance,
          GRANT_MESSAGE .. '\n' .. string.format('%d', ch.claimMs) .. '\n' .. token .. '\n' .. ch.id)
      end
    end
  end
end

-- Tells every instance holding a slot of the channel, once each, that a queue formed, so none of them passes a slot
-- on locally ahead of it (a handoff).
local function tellHolders(ch)
  local told = {}
  for _, holder in ipairs(redis.call('ZRANGE', ch.slots, 0, -1)) do
    local instance = instanceOf(holder)
    if not told[instance] then
      told[instance] = true
      redis.call('PUBLISH', ch.notify .. instance, QUEUED_MESSAGE .. '\n' .. ch.id)
    end
  end
end
