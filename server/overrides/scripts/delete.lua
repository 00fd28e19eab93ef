-- Forgets one runtime override.
-- KEYS[1] the hash of overrides, KEYS[2] the version
-- ARGV[1] the id
-- Returns 1 when there was one (and the version was incremented), else 0.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('INCR', KEYS[2])
return 1
