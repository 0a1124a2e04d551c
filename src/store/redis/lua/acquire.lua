--[[
  acquire: try channels in order and admit the token into the first one with a free slot.

  KEYS[2i-1]  slots key of channel i     (sorted set: member = lease token, score = expiry ms)
  KEYS[2i]    cooldown key of channel i  (string; exists while the channel cools down)
  ARGV[1]     lease token
  ARGV[2]     lease TTL in ms
  ARGV[3]     "1" to check cooldowns, "0" to skip the check (cooldown_enabled = false)
  ARGV[3+i]   max concurrency of channel i (> 0)

  Returns an array with one code per channel tried, stopping at the first admission:
    1 = acquired, 0 = full, 2 = cooling
  With one channel (the common case) it costs: EXISTS (when checking), TIME, ZCARD, ZADD, PTTL (+ PEXPIRE at most
  once per TTL/4 per key).
  A cooling channel costs EXISTS only; a full one EXISTS, TIME, ZCARD, ZREMRANGEBYSCORE. Expired members are
  dropped when the set looks full.
  The slots key's expiry is only ever extended (to TTL when less than 3/4 TTL is left), so a crashed holder's channel
  leaves no key behind within one TTL, and a shorter lease_ttl_ms can never expire a key that still holds longer
  leases; renewals (every TTL/3) extend it to a full TTL.
]]
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local check = ARGV[3] == '1'
local now = nil
local replies = {}
for i = 1, #KEYS / 2 do
  local slots = KEYS[2 * i - 1]
  if check and redis.call('EXISTS', KEYS[2 * i]) == 1 then
    replies[i] = 2
  else
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local max = tonumber(ARGV[3 + i])
    local n = redis.call('ZCARD', slots)
    if n >= max then
      n = n - redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
    end
    if n < max then
      redis.call('ZADD', slots, now + ttl, token)
      -- Extend the key's expiry only when it has less than 3/4 of a TTL left: at most once per TTL/4 per busy
      -- key instead of on every acquire. An unrenewed lease still outlives its first renewal (TTL/3) with room.
      if redis.call('PTTL', slots) < ttl * 3 / 4 then
        redis.call('PEXPIRE', slots, ttl)
      end
      replies[i] = 1
      return replies
    end
    replies[i] = 0
  end
end
return replies
