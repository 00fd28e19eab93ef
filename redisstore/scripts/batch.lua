-- batch.lua: decide several independent checks in one call, one after
-- another, each all-or-nothing exactly as take.lua decides it, at one time.
-- argv[1] is the clock (as in args.lua); then come the checks' requests,
-- in order, each as in args.lua, those of a check of several requests
-- preceded by their count (a limit argument is never shorter than 5
-- characters, a count is). KEYS are the checks' own, concatenated in order.
-- On a Redis Cluster every key must be in one slot, as for any script.
--
-- Returns one flat array: for each check in order, the stride of its
-- results (6 or 8), then the values take.lua would return for it.
--
-- The server pays for a script call, its setup and TIME once per batch
-- instead of once per check, which is most of the cost of a single
-- decision; and every argument costs it time, hence no clock or count per
-- single request.
local now = clock_of(argv[1])
local out, o, b, k = {}, 0, 2, 1
local argc = #argv
while b <= argc do
  local n, a = 1, argv[b]
  if #a < 5 then
    n, b = tonumber(a), b + 1
  end
  local _
  _, b, k, o = check(now, n, b, k, out, o)
end
return out
