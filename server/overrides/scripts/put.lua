-- Keeps one runtime override, unless the hash is full.
-- KEYS[1] the hash of overrides (field: the override's id, value: its JSON)
-- KEYS[2] the version, incremented by every change
-- ARGV[1] the id, ARGV[2] the JSON, ARGV[3] the most overrides kept
-- Returns 1 when kept, 0 when the hash holds ARGV[3] others already.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
