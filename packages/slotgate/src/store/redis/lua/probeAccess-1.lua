--[[
  probeAccess: which of the commands slotgate's scripts run the Redis user may not run here (an ACL rule too narrow:
  docs/redis.md, "TLS and a least-privilege user"). Each is tried in a form that changes nothing; a command allowed but
  refused for its argument's type (WRONGTYPE) is allowed.

  KEYS[1]  a probe key under the prefix, in the slot of the epoch key (it exists only during the call)
  ARGV[1]  a grants channel no instance listens on

  Returns the denied ones as "<command>" (the command), "<command> key" (keys under the prefix) or
  "<command> channel" (the prefix's pub/sub channels); empty when the user may run everything.
  Cost: one call of each command on an absent key. Once per connection, before the epoch check.
]]
local k, c = KEYS[1], ARGV[1]
local probes = {
  { 'INFO', 'server' }, { 'TIME' },
  { 'GET', k }, { 'SET', k, '', 'PX', 1, 'XX' }, { 'EXISTS', k }, { 'TYPE', k }, { 'PTTL', k },
  { 'PEXPIRE', k, 1 }, { 'PEXPIREAT', k, 1 },
  { 'ZADD', k, 'XX', 0, 'm' }, { 'ZCARD', k }, { 'ZCOUNT', k, 0, 0 }, { 'ZRANGE', k, 0, 0 },
  { 'ZRANGEBYSCORE', k, 0, 0 }, { 'ZREM', k, 'm' }, { 'ZREMRANGEBYSCORE', k, 1, 0 }, { 'ZSCORE', k, 'm' },
  -- the one probe that writes, then the two that take it away again
  { 'HSET', k, 'f', '' }, { 'HGET', k, 'f' }, { 'HMGET', k, 'f' }, { 'HGETALL', k }, { 'HDEL', k, 'f' }, { 'DEL', k },
  { 'PUBLISH', c, '' },
}
local denied = {}
for _, probe in ipairs(probes) do
  local reply = redis.pcall(unpack(probe))
  local err = type(reply) == 'table' and reply.err
  if err and (string.find(err, 'NOPERM') or string.find(err, "can't") or string.find(err, 'no permissions')) then
    local what = probe[1]:lower()
    if string.find(err, 'key') then what = what .. ' key'
    elseif string.find(err, 'channel') then what = what .. ' channel' end
    denied[#denied + 1] = what
  end
end
return denied
