-- The wait queue of one channel: one sorted set, member = "<max>|<live>|<token>", score = arrival on the Redis clock in
-- µs (FIFO, within the fair share between clients). A registration lives <live> ms past its arrival: its waiter's
-- wait timeout plus a margin, at most MAX_LIVE_MS, so every member older than that has run out. Needs redisNow.

-- The longest a registration lives (queues.ts, MAX_REGISTRATION_LIVE_MS: wait_timeout_ms at its bound, plus 2 s).
local MAX_LIVE_MS = 62000

-- The arrival (µs) at or before which a registration living `liveMs` has run out: a number, and as deadCutoff a
-- score string for ZCOUNT and ZREMRANGEBYSCORE.
local function cutoffUs(liveMs)
  return (redisNow() - liveMs) * 1000
end
local function deadCutoff(liveMs)
  return string.format('%d', cutoffUs(liveMs))
end

-- Drops the registrations older than the longest lifetime, which have all run out (the oldest: one
-- ZREMRANGEBYSCORE). A shorter-lived one that ran out goes when a grant loop reaches it. Returns how many went.
local function dropExpiredWaiters(queueKey)
  return redis.call('ZREMRANGEBYSCORE', queueKey, '-inf', deadCutoff(MAX_LIVE_MS))
end

-- The token of a queue member "<max>|<live>|<token>", the max its waiter asked under, and its lifetime in ms (0 for
-- a member of another shape, which has then run out: no script of this layout writes one).
local function splitMember(member)
  local a = string.find(member, '|', 1, true)
  local b = string.find(member, '|', a + 1, true)
  local live = b and tonumber(string.sub(member, a + 1, b - 1))
  if not live then
    return string.sub(member, a + 1), tonumber(string.sub(member, 1, a - 1)), 0
  end
  return string.sub(member, b + 1), tonumber(string.sub(member, 1, a - 1)), live
end

-- The queue key's expiry, checked for a registration living `liveMs`: extended to twice that when it has less than 1.5
-- times it left (never shortened), so the key outlives every registration of that lifetime made within a quarter of
-- it after the check, and a key whose members all ran out goes within two lifetimes.
local function extendQueue(queueKey, liveMs)
  if redis.call('PTTL', queueKey) < liveMs + math.floor(liveMs / 2) then
    redis.call('PEXPIRE', queueKey, 2 * liveMs)
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

-- How many of the oldest waiters a grant chooses among (core/fair-share.ts, FAIR_WINDOW).
local FAIR_WINDOW = 64

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

-- Grants the channel's free slots to its live waiters: the oldest first, within the fair share between clients.
-- Among the oldest FAIR_WINDOW waiters, when they belong to more than one client, a slot goes to the waiter whose
-- client holds the fewest live slots of the channel relative to its weight (oldest first among equals; one
-- ZRANGEBYSCORE of the live slots per call, read once); with one client's waiters only, to the oldest (plain FIFO).
-- Each granted token becomes a lease that expires at the claim deadline unless its instance claims it (renews it)
-- first, and its instance is told on its grants channel (notify .. instanceId). A waiter asking under a lower max than
-- the slots in use waits (a pick that cannot be served leaves the choice to the oldest).
-- The slots key keeps at least a lease TTL of expiry, as after an acquire (extended to 1.25 TTL when below it).
-- `quiet` is a member granted without a message (the caller answers it directly). The oldest waiters are read
-- FAIR_WINDOW at a time with their arrivals; when the oldest is older than the longest lifetime, every such one goes
-- first (dropExpiredWaiters), and a waiter chosen whose registration ran out (its arrival and its lifetime say so: no
-- lookup) goes with a ZREM, and the choice is made again, so each waiter granted or returned is live. Returns the
-- members granted, and the oldest (live) member left in the queue, nil when it is empty. An empty queue costs its
-- ZRANGE alone. A waiter of `localInstance` (the instance running this script, which reads the reply) is granted a
-- full lease at once, with no message and no claim: the caller hands it over. `trusted`: the caller knows the slots
-- key has at least 3/4 of a lease TTL left (its store had it extended within TTL/4), so a grant checks its expiry
-- only when the key was empty (just created). The third value returned is true when a grant checked the key's expiry
-- (it then has at least a lease TTL).
local function grantFree(slotsKey, queueKey, claimMs, leaseTtl, notify, channelId, quiet, localInstance, trusted)
  local granted = {}
  local live, swept = nil, false
  local grantedMax = nil -- the lowest max a waiter was granted under in this call
  local checked = false
  local held = nil
  local pruned = false -- the registrations older than the longest lifetime were dropped
  -- clients: each window member's client, read once per window, or nil when no member of the window names one (then
  -- the pick is the oldest: plain FIFO, and no member is parsed for it)
  local window, arrivals, gone, left, clients = {}, {}, {}, 0, nil
  while true do
    if left == 0 then
      -- the members granted or dropped so far are gone: these are the next oldest
      gone = {}
      local raw = redis.call('ZRANGE', queueKey, 0, FAIR_WINDOW - 1, 'WITHSCORES')
      if not pruned and raw[2] then
        pruned = true
        if tonumber(raw[2]) <= cutoffUs(MAX_LIVE_MS) and dropExpiredWaiters(queueKey) > 0 then
          raw = redis.call('ZRANGE', queueKey, 0, FAIR_WINDOW - 1, 'WITHSCORES')
        end
      end
      window, arrivals = {}, {}
      for i = 1, #raw, 2 do
        window[#window + 1] = raw[i]
        arrivals[#window] = raw[i + 1]
      end
      left = #window
      if left == 0 then
        return granted, nil, checked
      end
      -- a token naming a client holds '~' (shareOf): one search over the whole window says whether any does
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
    if not live then
      live = redis.call('ZCARD', slotsKey)
    end
    -- the pick: the oldest, unless the waiters looked at belong to several clients
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
        for _, t in ipairs(redis.call('ZRANGEBYSCORE', slotsKey, '(' .. leaseNow(), '+inf')) do
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
    -- expired leases are swept once, when they would keep a waiter out (a later one may ask under a lower max). Not
    -- when this call just granted under this max or a lower one: the freed slot it granted filled the channel, and a
    -- sweep after every grant would cost a command per grant under overload; the calls that find the channel full
    -- with nothing to grant (a waiter's safety poll, a leave on time-out, an acquire) sweep instead
    if live >= max and not swept and not (grantedMax and grantedMax <= max) then
      swept = true
      live = live - redis.call('ZREMRANGEBYSCORE', slotsKey, '-inf', leaseNow())
    end
    if live >= max and pick ~= first then
      -- the pick cannot be served under its max: the choice goes back to the oldest
      pick = first
      head = window[pick]
      token, max = splitMember(head)
    end
    if ranOut(head, arrivals[pick]) then
      -- a dead waiter (its instance died without leaving): it goes, and the choice is made again
      redis.call('ZREM', queueKey, head)
      gone[pick], left = true, left - 1
    elseif live >= max then
      return granted, head, checked
    else
      local instance = instanceOf(token)
      local mine = localInstance ~= nil and localInstance ~= '' and instance == localInstance
      local deadline = redisNow() + (mine and leaseTtl or claimMs)
      redis.call('ZADD', slotsKey, deadline, token)
      -- below a lease TTL: extended with a quarter TTL to spare, so a busy channel's grants extend it once per TTL/4
      -- (a key that was empty has just been created by this ZADD, with no expiry: always checked)
      if not (trusted and live > 0) and not checked then
        checked = true
        if redis.call('PTTL', slotsKey) < leaseTtl then
          redis.call('PEXPIRE', slotsKey, leaseTtl + math.floor(leaseTtl / 4))
        end
      end
      redis.call('ZREM', queueKey, head)
      gone[pick], left = true, left - 1
      live = live + 1
      if held then
        local c = shareOf(token)
        held[c] = (held[c] or 0) + 1
      end
      granted[#granted + 1] = head
      if not grantedMax or max < grantedMax then
        grantedMax = max
      end
      if head ~= quiet and not mine then
        -- "G\n<claim deadline, Redis ms>\n<token>\n<channel>": with the deadline, the instance may admit its waiter at
        -- once and claim after (queues.ts)
        local message = 'G\n' .. string.format('%d', deadline) .. '\n' .. token .. '\n' .. channelId
        redis.call('PUBLISH', notify .. instance, message)
      end
    end
  end
end

-- Tells every instance holding a slot of the channel, once each, that a queue formed and when on the Redis clock
-- ("Q\n<ms>\n<channel>"), so none of them passes a slot on locally ahead of it or gives one back by a plain ZREM, and
-- one whose plain ZREM may have run after this (queue-marks.ts, formed) grants the slot it freed. Costs a ZRANGE of the
-- slots and one PUBLISH per holding instance (and a TIME when the script read none).
local function tellHolders(slotsKey, notify, channelId)
  local told = {}
  local message = nil
  for _, holder in ipairs(redis.call('ZRANGE', slotsKey, 0, -1)) do
    local instance = instanceOf(holder)
    if not told[instance] then
      told[instance] = true
      message = message or ('Q\n' .. string.format('%d', leaseNow()) .. '\n' .. channelId)
      redis.call('PUBLISH', notify .. instance, message)
    end
  end
end
