-- take.lua: decide n requests all-or-nothing (see state.lua for KEYS and
-- ARGV). One request is decided and charged in one pass; several are first
-- decided with their charges applied to copies of their states (or without
-- charging, for the log algorithms), and charged only if every one is
-- admitted.
-- When the check is refused, a request that alone would have been admitted
-- reports its current state with allowed = 0 and no retry. Returns 6 or 8
-- values per request (see reply in state.lua): allowed, limit, remaining,
-- retry (µs), reset (µs), delay (µs)[, lease, undo token].
local now = clock()
local n = tonumber(ARGV[2])
if n == 1 then -- the common case, without the tables a check needs
  local p, st = load(1, 3)
  local r = step(p, st, now, true)
  save(st, now)
  return reply_one(r)
end
local ps, sts, rs = {}, {}, {}
local b = 3
for i = 1, n do
  ps[i], sts[i], b = load(i, b)
end
do
  -- The first pass charges a copy of each scalar state (all algorithms but
  -- sliding_log and concurrency, whose charge writes their log at once), so
  -- that an admitted check keeps the copies instead of deciding each
  -- request a second time. A refused request's copy holds its state
  -- normalised and not charged, as the first pass leaves it.
  local all, charged = true, {}
  for i = 1, n do
    local p, st = ps[i], sts[i]
    if p.cost > 0 and st.alg ~= 2 and st.alg ~= 8 then
      charged[i] = copy(st)
      rs[i] = algorithms[p.alg](charged[i], p, now, p.cost, true)
    else
      rs[i] = step(p, st, now, false)
    end
    all = all and rs[i].allowed
  end
  for i = 1, n do
    if all then
      if charged[i] then
        sts[i] = charged[i]
      else
        rs[i] = step(ps[i], sts[i], now, true)
      end
    elseif charged[i] and not rs[i].allowed then
      sts[i] = charged[i]
    elseif rs[i].allowed then
      -- admitted alone, refused with the check: report the state uncharged
      -- (the peek normalises it, as the first pass would have)
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
