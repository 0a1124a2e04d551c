--[[
  readSettings: the settings overrides and the record of their last change, read together, with the digest of the
  overrides as stored now (the reader compares it with the record's to see a change made outside the scripts).

  KEYS[1]  the overrides hash: field = setting key, value = JSON
  KEYS[2]  the record hash: version, change, at, by, digest[, restored_at, restored_by]

  Returns { overrides (flat field/value list), record (flat field/value list, empty when there is none), digest }.
  Read-only. Cost: HGETALL 2.
]]
--- @include "settingsRecord"
return { redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]), settingsDigest() }
