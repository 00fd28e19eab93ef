-- take.lua: decide n requests all-or-nothing (see args.lua for KEYS and
-- ARGV, and check in check.lua for how). Returns 6 or 8 values per request (see
-- emit in reply.lua): allowed, limit, remaining, retry (µs), reset (µs),
-- delay (µs)[, lease, undo token]; a single request that a token bucket,
-- GCRA or a fixed or sliding window admits, one integer (see check
-- in check.lua; batch.go's values reads it).
local a = argv[2]
if #a < 5 then -- a count: a check of several requests
  return (check(clock_of(argv[1]), a + 0, 3, 1))
end
return (check(clock_of(argv[1]), 1, 2, 1))
