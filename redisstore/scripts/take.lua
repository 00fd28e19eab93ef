-- take.lua: decide n requests all-or-nothing (see state.lua for KEYS and
-- ARGV, and check there for how). Returns 6 or 8 values per request (see
-- emit in state.lua): allowed, limit, remaining, retry (µs), reset (µs),
-- delay (µs)[, lease, undo token].
return (check(clock_of(argv[1]), argv[2] + 0, 3, 1))
