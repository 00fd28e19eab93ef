-- one.lua: take.lua for the commonest call, one request on the server's
-- clock: its keys and its one argument (see args.lua), without the clock
-- argument and the count (every argument costs the server time).
--
-- A plain request (its argument a limit seen before, so parsed in plists:
-- cost 1, no lease, no undo token) of an algorithm without a log is
-- decided here, as check decides a single request, without what a batch,
-- a log, a lease or an undo token need there (about 2k instructions of a
-- 60k decision).
local a = argv[1]
local p = plists[a]
if p and p.alg ~= SLIDING_LOG and p.alg ~= CONCURRENCY then
  local alg, key, now = p.alg, keys[1], clock_of('')
  local x, y, z, e, existed, pw = state_of(p, now, read_state(alg, key))
  local allowed, remaining, retry, reset, delay, x2, y2, z2, idle = algorithms[alg](p, x, y, z, now, 1, true)
  if idle > 0 or x2 ~= x or y2 ~= y or z2 ~= z or pw and existed then
    write_state(alg, key, nil, existed, x2, y2, z2, idle, e, now, x, y, pw)
  end
  local v = packed(alg, p.limit, allowed, remaining, retry, reset, delay)
  if v then
    return v
  end
  return { allowed and 1 or 0, p.limit, remaining, retry, reset, delay }
end
return (check(clock_of(''), 1, 1, 1))
