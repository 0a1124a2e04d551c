--[[
  restoreSettings: put back overrides the store lost (a Redis that restarted empty, or a snapshot older than what an
  instance has read), with the record they had, marked as restored; then announce it. Every instance that sees the
  loss sends what it last read: the highest version wins, whatever order they arrive in, and a reset (recorded with
  its own version) is never undone by an older copy.

  KEYS[1]  the overrides hash
  KEYS[2]  the record hash
  ARGV[1]  the announcement channel
  ARGV[2]  the instance restoring
  ARGV[3]  the version restored (the record's, as the instance read it)
  ARGV[4]  its change: update | reset | external
  ARGV[5]  its time in ms ('' when unknown)
  ARGV[6]  its instance ('' when unknown)
  ARGV[7..] the overrides, field, value pairs (none for a reset)

  Only when the record is gone or older than ARGV[3]: replaces the overrides and the record.
  Returns the Redis time of the restore in ms, or 0 when the store holds that version or a newer one.
  Cost: HGET; when restoring TIME, DEL, HSET, HGETALL, DEL + HSET of the record, PUBLISH.
]]
--- @include "redisNow"
--- @include "settingsRecord"
if recordedVersion() >= tonumber(ARGV[3]) then return 0 end
redis.call('DEL', KEYS[1])
if #ARGV > 6 then redis.call('HSET', KEYS[1], unpack(ARGV, 7)) end
local now = redisNow()
writeRecord({ 'version', ARGV[3], 'change', ARGV[4], 'at', ARGV[5], 'by', ARGV[6], 'restored_at', now,
  'restored_by', ARGV[2] })
redis.call('PUBLISH', ARGV[1], 'restored')
return now
