-- The overrides hash and the record of its last change (KEYS[1] and KEYS[2] of the settings scripts).
-- settingsDigest(): a digest of the overrides' content, whatever the order HGETALL lists the fields in: the SHA-1 of
-- the sorted "field=value" lines. Only scripts compute it, so it is compared on one server's collation only.
local function settingsDigest()
  local flat = redis.call('HGETALL', KEYS[1])
  local lines = {}
  for i = 1, #flat, 2 do
    lines[#lines + 1] = flat[i] .. '=' .. flat[i + 1]
  end
  table.sort(lines)
  return redis.sha1hex(table.concat(lines, '\n'))
end
-- recordedVersion(): the record's version, 0 when there is no record (nothing written, or a Redis that lost it).
local function recordedVersion()
  return tonumber(redis.call('HGET', KEYS[2], 'version')) or 0
end
-- writeRecord(fields): replaces the record with these field/value pairs plus the digest of the content now stored.
local function writeRecord(fields)
  redis.call('DEL', KEYS[2])
  fields[#fields + 1] = 'digest'
  fields[#fields + 1] = settingsDigest()
  redis.call('HSET', KEYS[2], unpack(fields))
end
