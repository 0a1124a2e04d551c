--[[
  acquireSlots: one or more acquire requests in one atomic call (on a single Redis node, the store coalesces the
  requests of one event-loop turn; on Cluster every call is one request for one channel). Each request tries its
  channels in order and is admitted into the first one with a free slot.

  KEYS[2c-1]  slots key of channel c      (sorted set: member = lease token, score = expiry ms)
  KEYS[2c]    cooldown key of channel c   (string; exists while the channel cools down)
  ARGV[1]     lease TTL in ms (every request of a call has the same TTL and cooldown setting)
  ARGV[2]     "1" to check cooldowns, "0" to skip the check (cooldown_enabled = false)
  ARGV[3]     number of channels C (= #KEYS / 2)
  ARGV[4..]   per channel c: max concurrency (> 0), then "1" to ask for an extension of its key's expiry
  then        per request: its token, then the indexes of the channels to try in order, the last one negated

  Returns one flat array of codes: for each request in order, one code per channel tried, stopping at the first
  admission (1 = acquired, 0 = full, 2 = cooling). The caller splits it: a request's codes end at its first 1 or
  after its last channel. (Few arguments per request and a flat array of integers are the cheapest to pass.)

  Cost per call: TIME once; one EXISTS over every cooldown key of the call (when checking) and, only when one of
  them exists, one EXISTS per channel tried (none when the call has one channel); ZCARD once per channel; ZADD per admission. Per call and channel the
  script keeps the count it read, so requests for the same channel in one call share a ZCARD. Expired members are
  dropped when a set looks full (ZREMRANGEBYSCORE, once per channel per call). Lease scores are formatted once per
  call and TTL (Lua would otherwise format a float for every ZADD).
  Key expiry: a slots key that was empty gets PEXPIRE TTL with its first lease. Otherwise the caller asks for an
  extension when it has not extended that key for TTL/4, and the script then extends the expiry to TTL (PTTL first:
  it never shortens a key holding longer leases). So every admission leaves the key with at least 3/4 TTL at the
  cost of one PTTL + PEXPIRE per key per TTL/4 per instance; renewals (every TTL/3) extend it to a full TTL, and a
  crashed holder's channel leaves no key behind within one TTL.
]]
--- @include "redisNow"
local ttl = ARGV[1]
local channels = tonumber(ARGV[3])
local anyCooling = false
if ARGV[2] == '1' then
  local cooldownKeys = {}
  for c = 1, channels do
    cooldownKeys[c] = KEYS[2 * c]
  end
  anyCooling = redis.call('EXISTS', unpack(cooldownKeys)) > 0
end
local cooling, count, swept, extended = {}, {}, {}, {}
if channels == 1 then
  cooling[1] = anyCooling
end
local score = nil
local codes = {}
local a = 4 + 2 * channels
while a <= #ARGV do
  local token = ARGV[a]
  local admitted = false
  local last = false
  repeat
    a = a + 1
    local c = tonumber(ARGV[a])
    if c < 0 then
      c = -c
      last = true
    end
    local cool = false
    if anyCooling and not admitted then
      cool = cooling[c]
      if cool == nil then
        cool = redis.call('EXISTS', KEYS[2 * c]) == 1
        cooling[c] = cool
      end
    end
    if admitted then
      -- the request was admitted: the rest of its channels are not tried
    elseif cool then
      codes[#codes + 1] = 2
    else
      local slots = KEYS[2 * c - 1]
      local max = tonumber(ARGV[2 + 2 * c])
      local live = count[c]
      if not live then
        live = redis.call('ZCARD', slots)
      end
      if live >= max and not swept[c] then
        swept[c] = true
        live = live - redis.call('ZREMRANGEBYSCORE', slots, '-inf', redisNow())
      end
      if live < max then
        if not score then
          score = string.format('%d', redisNow() + tonumber(ttl))
        end
        redis.call('ZADD', slots, score, token)
        if live == 0 then
          redis.call('PEXPIRE', slots, ttl)
          extended[c] = true
        elseif ARGV[3 + 2 * c] == '1' and not extended[c] then
          extended[c] = true
          if redis.call('PTTL', slots) < tonumber(ttl) then
            redis.call('PEXPIRE', slots, ttl)
          end
        end
        count[c] = live + 1
        codes[#codes + 1] = 1
        admitted = true
      else
        count[c] = live
        codes[#codes + 1] = 0
      end
    end
  until last
  a = a + 1
end
return codes
