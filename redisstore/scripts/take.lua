-- take.lua: decide n requests all-or-nothing (see state.lua for KEYS and
-- ARGV). One request is decided and charged in one pass; several are first
-- decided without charging, then charged only if every one is admitted.
-- When the check is refused, a request that alone would have been admitted
-- reports its current state with allowed = 0 and no retry. Returns 6 or 8
-- values per request (see reply in state.lua): allowed, limit, remaining,
-- retry (µs), reset (µs), delay (µs)[, lease, undo token].
local now = clock()
local n = tonumber(ARGV[2])
local ps, sts, rs = {}, {}, {}
local b = 3
for i = 1, n do
  ps[i], sts[i], b = load(i, b)
end
if n == 1 then
  rs[1] = step(ps[1], sts[1], now, true)
else
  local all = true
  for i = 1, n do
    rs[i] = step(ps[i], sts[i], now, false)
    all = all and rs[i].allowed
  end
  for i = 1, n do
    if all then
      rs[i] = step(ps[i], sts[i], now, true)
    elseif rs[i].allowed then
      local cost = ps[i].cost
      ps[i].cost = 0
      rs[i] = step(ps[i], sts[i], now, false)
      ps[i].cost = cost
      rs[i].allowed, rs[i].retry, rs[i].delay = false, 0, 0
    end
  end
end
for i = 1, n do
  save(sts[i], now)
end
return reply(rs)
