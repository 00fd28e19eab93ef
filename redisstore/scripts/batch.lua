-- batch.lua: decide several independent checks in one call, one after
-- another, each all-or-nothing exactly as take.lua decides it. KEYS and ARGV
-- are the checks' own, concatenated in order: check j's arguments (its
-- clock, its request count n, its requests, as in state.lua) follow those
-- of check j-1, and so do its keys. On a Redis Cluster every key must be in
-- one slot, as for any script.
--
-- Returns one flat array: for each check in order, the stride of its
-- results (6 or 8), then the values take.lua would return for it.
--
-- The server pays for a script call, its setup and TIME once per batch
-- instead of once per check, which is most of the cost of a single
-- decision.
local out, o, b, k = {}, 0, 1, 1
local argc = #ARGV
while b <= argc do
  local _
  _, b, k, o = check(clock_of(ARGV[b]), tonumber(ARGV[b + 1]), b + 2, k, out, o)
end
return out
