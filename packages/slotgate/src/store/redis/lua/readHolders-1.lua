--[[
  readHolders: the tokens of a channel's live leases (an operators' view of who holds its slots), read-only.

  KEYS[1]  slots key (sorted set: member = lease token, score = expiry ms on the Redis clock)

  Returns the tokens whose lease expires after now.
  Cost: TIME, ZRANGEBYSCORE.
]]
--- @include "redisNow"
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. redisNow(), '+inf')
