--[[
  fixLeftover: undo one finding of the leftover-key check if it still stands.

  KEYS[1]  the key reported
  ARGV[1]  the finding's kind: expired_members | no_expiry | cooldown_without_ttl | wrong_type | unknown_key
  ARGV[2..] expired_members: the members reported as expired; wrong_type / unknown_key: the type reported

  - expired_members: removes each member only while it has still run out on the Redis clock (a late renewal may have
    revived a lease);
  - no_expiry: gives a slots key without expiry the expiry of its newest member, or deletes it when none is live;
    a queue (scores are arrival times, not expiries) gets two minutes, past any registration's end, as enqueues
    extend it, and a peak key (a hash) two minutes, as its notes do;
  - cooldown_without_ttl: deletes the string while it still has no TTL;
  - wrong_type / unknown_key: deletes the key while it still has the type reported.

  Returns the number of removals, an expiry set counting as one.
  Cost: TYPE, then TIME + ZSCORE/ZREM per member, or PTTL + ZRANGE + PEXPIREAT/DEL (a queue or a peak key: PTTL +
  PEXPIRE), or PTTL + DEL, or DEL.
]]
--- @include "redisNow"
local kind = ARGV[1]
local ktype = redis.call('TYPE', KEYS[1]).ok
local queue = string.sub(KEYS[1], -5) == ':fifo'
if kind == 'expired_members' then
  if ktype ~= 'zset' then return 0 end
  local n = 0
  for i = 2, #ARGV do
    local cutoff = redisNow()
    if queue then
      cutoff = (cutoff - (tonumber(string.match(ARGV[i], '^[^|]*|([^|]*)|')) or 0)) * 1000
    end
    local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if score and tonumber(score) <= cutoff then
      n = n + redis.call('ZREM', KEYS[1], ARGV[i])
    end
  end
  return n
end
if kind == 'no_expiry' then
  local peak = ktype == 'hash' and string.sub(KEYS[1], -5) == ':peak'
  if (ktype ~= 'zset' and not peak) or redis.call('PTTL', KEYS[1]) ~= -1 then return 0 end
  if peak then
    return redis.call('PEXPIRE', KEYS[1], 120000)
  end
  if queue then
    return redis.call('PEXPIRE', KEYS[1], 120000)
  end
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > redisNow() then
    return redis.call('PEXPIREAT', KEYS[1], newest[2])
  end
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
