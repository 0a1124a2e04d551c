--[[
  registerWaiter: add a waiter unless the channel's queue is full (atomic guard: a burst of N registrations against
  max waiting M registers exactly min(N, M)).

  KEYS[1]  waiters key (sorted set: member = waiter token, score = registration expiry ms)
  ARGV[1]  waiter token
  ARGV[2]  max waiting (>= 1)
  ARGV[3]  registration TTL in ms (the wait deadline plus a margin)

  Returns 1 = registered, 0 = queue full.
  Cost: TIME, ZCARD (+ ZREMRANGEBYSCORE when it looks full), ZADD, PTTL (+ PEXPIRE when it extends).
]]
--- @include "redisNow"
local now = redisNow()
local max = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
if n >= max then
  n = n - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if n >= max then
    return 0
  end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
