-- release.lua: end a concurrency lease. KEYS and ARGV as in args.lua with
-- one request whose lease field names the lease. Returns {1} if it was held,
-- {0} if not (released already, or expired).
local r = load(1, 3, clock())
local held, y = release_lease(r.log, r.lease, r.y)
if held then
  redis.call('HSET', r.key, 'y', int(y))
  return { 1 }
end
return { 0 }
