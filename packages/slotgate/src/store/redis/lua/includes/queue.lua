-- The wait queue of one channel: `queue` (member = "<max>|<token>", score = arrival on the Redis clock in µs: FIFO)
-- and `waiters` (the same members, score = registration expiry in ms: a dead waiter drops out). Needs redisNow.

-- Drops every waiter whose registration expired, from both sets. Returns how many went.
local function dropExpiredWaiters(waitersKey, queueKey)
  local expired = redis.call('ZRANGEBYSCORE', waitersKey, '-inf', redisNow())
  if #expired == 0 then
    return 0
  end
  redis.call('ZREM', waitersKey, unpack(expired))
  redis.call('ZREM', queueKey, unpack(expired))
  return #expired
end

-- The token of a queue member "<max>|<token>", and the max its waiter asked under.
local function splitMember(member)
  local sep = string.find(member, '|', 1, true)
  return string.sub(member, sep + 1), tonumber(string.sub(member, 1, sep - 1))
end

-- The instance id of a token "<instanceId>:<seq>".
local function instanceOf(token)
  return string.match(token, '^(.*):[^:]*$') or token
end

-- Grants the channel's free slots to its oldest live waiters, in arrival order: each granted token becomes a lease
-- that expires at the claim deadline unless its instance claims it (renews it) first, and its instance is told on
-- its grants channel (notify .. instanceId). A head waiter asking under a lower max than the slots in use waits.
-- The slots key keeps at least a lease TTL of expiry, as after an acquire (extended to 1.25 TTL when below it). `quiet` is a member granted without a
-- message (the caller answers it directly). The heads are read two at a time, and a head that cannot be served
-- (the slots in use reach its max) is looked up only when `liveHead` asks for it. Returns the members granted, and
-- the member left at the head of the queue: nil when the queue is empty; with `liveHead`, a live registration (dead
-- ones ahead of it are dropped); without, possibly one that expired (dropped once it is reached with a slot free).
-- An empty queue costs its ZRANGE alone. A waiter of `localInstance` (the instance running this script, which reads
-- the reply) is granted a full lease at once, with no message and no claim: the caller hands it over.
local function grantFree(slotsKey, waitersKey, queueKey, claimMs, leaseTtl, notify, channelId, quiet, liveHead,
                         localInstance)
  local granted = {}
  local live, swept = nil, false
  local window, at = {}, 1
  while true do
    if at > #window then
      -- the members granted or dropped so far are gone: these are the next two heads
      window, at = redis.call('ZRANGE', queueKey, 0, 1), 1
      if #window == 0 then
        return granted, nil
      end
    end
    local head = window[at]
    at = at + 1
    local token, max = splitMember(head)
    if not live then
      live = redis.call('ZCARD', slotsKey)
    end
    -- expired leases are swept once, when they would keep a waiter out (a later head may ask under a lower max)
    if live >= max and not swept then
      swept = true
      live = live - redis.call('ZREMRANGEBYSCORE', slotsKey, '-inf', redisNow())
    end
    local expiry = nil
    if live < max or liveHead then
      expiry = redis.call('ZSCORE', waitersKey, head)
      if (not expiry) or tonumber(expiry) <= redisNow() then
        -- a dead waiter: it goes, and the next head is looked at
        redis.call('ZREM', queueKey, head)
        redis.call('ZREM', waitersKey, head)
        expiry = false
      end
    end
    if expiry == false then
      -- dropped above
    elseif live >= max then
      return granted, head
    else
      local instance = instanceOf(token)
      local mine = localInstance ~= nil and localInstance ~= '' and instance == localInstance
      redis.call('ZADD', slotsKey, redisNow() + (mine and leaseTtl or claimMs), token)
      -- below a lease TTL: extended with a quarter TTL to spare, so a busy channel's grants extend it once per TTL/4
      if redis.call('PTTL', slotsKey) < leaseTtl then
        redis.call('PEXPIRE', slotsKey, leaseTtl + math.floor(leaseTtl / 4))
      end
      redis.call('ZREM', queueKey, head)
      redis.call('ZREM', waitersKey, head)
      live = live + 1
      granted[#granted + 1] = head
      if head ~= quiet and not mine then
        redis.call('PUBLISH', notify .. instance, 'g\n' .. token .. '\n' .. channelId)
      end
    end
  end
end

-- Tells every instance holding a slot of the channel, once each, that a queue formed ("q\n<channel>"), so none of
-- them passes a slot on locally ahead of it. Costs a ZRANGE of the slots and one PUBLISH per holding instance.
local function tellHolders(slotsKey, notify, channelId)
  local told = {}
  for _, holder in ipairs(redis.call('ZRANGE', slotsKey, 0, -1)) do
    local instance = instanceOf(holder)
    if not told[instance] then
      told[instance] = true
      redis.call('PUBLISH', notify .. instance, 'q\n' .. channelId)
    end
  end
end
