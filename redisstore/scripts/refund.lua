-- refund.lua: give back what take.lua charged for requests of a check that
-- was refused on another Redis Cluster slot, then report each request's state
-- as a peek with allowed = 0. KEYS and ARGV as in state.lua; each request
-- carries the cost it was charged, its lease and the undo token take.lua
-- returned. Returns the values take.lua returns.
--
-- If nothing has touched a state since the charge, the state from before the
-- charge is restored exactly (a key the charge created is deleted), so the
-- check leaves no trace. Otherwise the charge is subtracted from the current
-- state.
local now = clock()
local n = tonumber(ARGV[2])
local rs = {}
local b, k = 3, 1
for i = 1, n do
  local p, st
  p, st, b, k = load(k, b)
  local c = st.cost
  local before, after, extra = string.match(st.undo, '^([^|]*)|([^|]*)|(.*)$')
  if c == 0 then
    -- a peek: nothing was charged
  elseif before == 'new' and after == snap(st) then
    -- the charge created the key and nothing else touched it: remove it
    redis.call('DEL', st.key, st.log)
    st.x, st.y, st.z, st.q, st.existed = 0, 0, 0, 0, false
  elseif p.alg == 2 then
    if redis.call('ZREM', st.log, extra) == 1 then
      st.y = st.y - c
    end
  elseif p.alg == 8 then
    release_lease(st, st.lease)
  elseif before and before ~= '' and after == snap(st) then
    local x, y, z = string.match(before, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
    st.x, st.y, st.z = tonumber(x), tonumber(y), tonumber(z)
  elseif p.alg == 1 or p.alg == 3 then
    local start = tonumber(extra)
    if st.x == start then
      st.y = max(0, st.y - c)
    elseif p.alg == 3 and st.x - start == p.P then
      st.z = max(0, st.z - c)
    end
  elseif p.alg == 4 then
    st.x = max(0, st.x - c * p.B)
  elseif p.alg == 5 or p.alg == 6 then
    local debt = 0
    if st.x > now then
      debt = (st.x - now) * p.A - st.y
    end
    debt = debt - c * p.B
    if debt <= 0 then
      st.x, st.y = 0, 0
    else
      local ahead = cdiv(debt, p.A)
      st.x, st.y = now + ahead, ahead * p.A - debt
    end
  elseif p.alg == 7 then
    local spent, take = string.match(extra, '^(%d+):(%d+)$')
    st.x = st.x - tonumber(spent)
    st.y = max(0, st.y - tonumber(take))
  end
  st.dirty = st.existed
  st.cost = 0
  rs[i] = step(p, st, now, false)
  rs[i].allowed, rs[i].retry, rs[i].delay = false, 0, 0
  save(st, now)
end
return reply(rs)
