-- release.lua: end a concurrency lease. KEYS and ARGV as in state.lua with
-- one request whose lease field names the lease. Returns {1} if it was held,
-- {0} if not (released already, or expired).
local _ = clock()
local p, st = load(1, 3)
local held = release_lease(st, st.lease)
if held then
  redis.call('HSET', st.key, 'y', int(st.y))
  return { 1 }
end
return { 0 }
