--[[
  fixLeftover: undo one finding of the leftover-key check if it still stands (the keys share the channel's hash tag,
  so it is Cluster-legal).

  KEYS[1]  the key reported
  KEYS[2]  for a waiters key, its channel's queue key (whose members go with the registrations); else KEYS[1] again
  ARGV[1]  the finding's kind: expired_members | no_expiry | cooldown_without_ttl | wrong_type | unknown_key
  ARGV[2..] expired_members: the members reported as expired
  ARGV[2]  wrong_type / unknown_key: the Redis type found when it was reported

  - expired_members: removes each member only while its score is still in the past on the Redis clock (a late
    renewal may have revived one), and an expired registration's member from the queue too;
  - no_expiry: gives a sorted set without expiry the expiry of its newest member, or deletes it when none is live
    (a waiters key with its queue: every registration in it has expired);
    a queue (scores are arrival times, not expiries) gets two minutes, past any wait deadline, as enqueues extend it;
  - cooldown_without_ttl: deletes the string while it still has no TTL;
  - wrong_type / unknown_key: deletes the key while it still has the type reported.

  Returns the number of removals, an expiry set counting as one.
  Cost: TYPE, then TIME + ZSCORE/ZREM per member, or PTTL + ZRANGE + PEXPIREAT/DEL, or PTTL + DEL, or DEL.
]]
--- @include "redisNow"
local kind = ARGV[1]
local ktype = redis.call('TYPE', KEYS[1]).ok
if kind == 'expired_members' then
  if ktype ~= 'zset' then return 0 end
  local now = redisNow()
  local n = 0
  for i = 2, #ARGV do
    local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if score and tonumber(score) <= now then
      n = n + redis.call('ZREM', KEYS[1], ARGV[i])
      if KEYS[2] ~= KEYS[1] then redis.call('ZREM', KEYS[2], ARGV[i]) end
    end
  end
  return n
end
if kind == 'no_expiry' then
  if ktype ~= 'zset' or redis.call('PTTL', KEYS[1]) ~= -1 then return 0 end
  if string.sub(KEYS[1], -6) == ':queue' then
    return redis.call('PEXPIRE', KEYS[1], 120000)
  end
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > redisNow() then
    return redis.call('PEXPIREAT', KEYS[1], newest[2])
  end
  if KEYS[2] ~= KEYS[1] then redis.call('DEL', KEYS[2]) end
  return redis.call('DEL', KEYS[1])
end
if kind == 'cooldown_without_ttl' then
  if ktype == 'string' and redis.call('PTTL', KEYS[1]) == -1 then
    return redis.call('DEL', KEYS[1])
  end
  return 0
end
if ktype == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
