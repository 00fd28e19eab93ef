-- refund.lua: give back what take.lua charged for requests of a check that
-- was refused on another Redis Cluster slot, then report each request's state
-- as a peek with allowed = 0. KEYS and ARGV as in args.lua; each request
-- carries the cost it was charged, its lease and the undo token take.lua
-- returned. Returns the values take.lua returns.
--
-- If nothing has touched a state since the charge, the state from before the
-- charge is restored exactly (a key the charge created is deleted), so the
-- check leaves no trace. Otherwise the charge is subtracted from the current
-- state.
local now = clock()
local n = tonumber(argv[2])
local rs = {}
local b, k = 3, 1
for i = 1, n do
  local r
  r, b, k = load(k, b, now)
  local p, c, x, y, z = r.p, r.c, r.x, r.y, r.z
  local alg = p.alg
  local before, after, extra = string.match(r.undo, '^([^|]*)|([^|]*)|(.*)$')
  local untouched = after == snap(x, y, z)
  if c == 0 then
    -- a peek: nothing was charged
  elseif before == 'new' and untouched then
    -- the charge created the key and nothing else touched it: remove it
    if r.log then
      redis.call('DEL', r.key, r.log)
    else
      redis.call('DEL', r.key)
    end
    x, y, z, r.existed = 0, 0, 0, false
  elseif alg == SLIDING_LOG then
    if redis.call('ZREM', r.log, extra) == 1 then
      y = y - c
    end
  elseif alg == CONCURRENCY then
    local _
    _, y = release_lease(r.log, r.lease, y)
  elseif before and before ~= '' and untouched then
    local bx, by, bz = string.match(before, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
    x, y, z = tonumber(bx), tonumber(by), tonumber(bz)
  elseif alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
    local start = tonumber(extra)
    if x == start then
      y = max(0, y - c)
    elseif alg == SLIDING_WINDOW and x - start == p.P then
      z = max(0, z - c)
    end
  elseif alg == TOKEN_BUCKET then
    x = max(0, x - c * p.B)
  elseif alg == GCRA or alg == LEAKY_BUCKET then
    local debt = 0
    if x > now then
      debt = (x - now) * p.A - y
    end
    debt = debt - c * p.B
    if debt <= 0 then
      x, y = 0, 0
    else
      local ahead = cdiv(debt, p.A)
      x, y = now + ahead, ahead * p.A - debt
    end
  elseif alg == WARM_UP then
    local spent, took = string.match(extra, '^(%d+):(%d+)$')
    x = x - tonumber(spent)
    y = max(0, y - tonumber(took))
  end
  -- reported as a peek of the state now, refused; written back whenever
  -- the key still exists
  r.allowed, r.remaining, r.retry, r.reset, r.delay, r.sx, r.sy, r.sz, r.idle =
    peek(r.f, p, x, y, z, now, r.log, r.lease)
  r.allowed, r.retry, r.delay = false, 0, 0
  if r.existed then
    write_state(alg, r.key, r.log, true, r.sx, r.sy, r.sz, 0, r.e, now, r.x, r.y, r.pw)
  end
  rs[i] = r
end
local reply = {}
emit(reply, 0, rs, false)
return reply
