--[[
  writeSettings: make a change to the settings overrides and record it (a version one higher than the last, the Redis
  time, the instance), then announce it.

  KEYS[1]  the overrides hash
  KEYS[2]  the record hash
  ARGV[1]  the announcement channel
  ARGV[2]  the change: update | reset | external
  ARGV[3]  the instance making it ('' for external)
  ARGV[4]  update and reset: the newest version the caller has read (0: none);
           external: the record's version when the caller read the content it records (0: no record)
  ARGV[5]  external: the digest of that content (readSettings); otherwise ''
  ARGV[6..] update: field, value pairs to set

  - update: sets the fields, unless the record is older than ARGV[4] (or gone): the store lost a change the caller
    knows, which it puts back first (restoreSettings-2.lua) so that the update builds on it. Replies -1 then.
  - reset: deletes the overrides; its version is above both the record's and ARGV[4], so a copy of the overrides of
    before, put back by an instance that missed the reset, never outranks it.
  - external: records a change made outside these scripts (by hand, or by an older release), only while the record
    and the content are still those the caller read; replies 0 otherwise (another instance recorded it first).

  Returns the version recorded (> 0), 0 (external, not recorded) or -1 (update, store behind the caller).
  Cost: HGET, TIME, the write (HSET, or DEL), HGETALL, DEL + HSET of the record, PUBLISH.
]]
--- @include "redisNow"
--- @include "settingsRecord"
local change = ARGV[2]
local known = tonumber(ARGV[4])
local version = recordedVersion()
if change == 'update' then
  if version < known then return -1 end
  redis.call('HSET', KEYS[1], unpack(ARGV, 6))
elseif change == 'reset' then
  version = math.max(version, known)
  redis.call('DEL', KEYS[1])
else
  if version ~= known or settingsDigest() ~= ARGV[5] then return 0 end
end
version = version + 1
writeRecord({ 'version', version, 'change', change, 'at', redisNow(), 'by', ARGV[3] })
redis.call('PUBLISH', ARGV[1], change)
return version
