-- decide.lua: one request decided on its state: take, peek, the undo token
-- of a charge, and loading and saving a request's state.

-- peek decides a request of cost 0, as algo.Step does: allowed, retry and
-- delay are those a request of cost 1 would get, the rest that of cost 0.
-- The state passes through both (a log algorithm prunes its log at once).
local function peek(f, p, x, y, z, now, log, lease)
  local allowed, _, retry, _, delay
  allowed, _, retry, _, delay, x, y, z = f(p, x, y, z, now, 1, false, log, lease)
  local _, remaining, _, reset, _, x2, y2, z2 = f(p, x, y, z, now, 0, false, log, lease)
  return allowed, remaining, retry, reset, delay, x2, y2, z2, 0
end

-- undo_token tells refund.lua how to give back a charge: "<state
-- before>|<state after>|<extra>", the state before being "new" if the key
-- did not exist. If nothing has changed the state since, the state before
-- is restored exactly (a new key is deleted); otherwise the charge is
-- subtracted using <extra>: the window start (fixed and sliding window),
-- the log member (sliding log), the time and warmth taken (warm-up).
local function undo_token(alg, before, x, y, z, c, e1, e2)
  local extra = ''
  if alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
    extra = int(e1)
  elseif alg == WARM_UP then
    extra = int(e1) .. ':' .. int(e2)
  elseif alg == SLIDING_LOG then
    extra = int(x) .. ':' .. int(c)
  end
  return before .. '|' .. snap(x, y, z) .. '|' .. extra
end

-- take decides a request of cost c (0: a peek) on state (x, y, z), charging
-- it if admitted and commit (see lib.lua): the decision, the state after
-- it, idle, and the lease and undo token to report, '' if none.
local function take(f, p, existed, x, y, z, now, c, commit, log, lease, undo)
  if c == 0 then
    local allowed, remaining, retry, reset, delay, x2, y2, z2 = peek(f, p, x, y, z, now, log, lease)
    return allowed, remaining, retry, reset, delay, x2, y2, z2, 0, '', ''
  end
  local before = nil
  if undo ~= '' and commit then
    -- the state the charge starts from, brought up to date as a peek does
    before = 'new'
    local _
    _, _, _, _, _, x, y, z = f(p, x, y, z, now, 0, false, log, lease)
    if existed then
      before = snap(x, y, z)
    end
  end
  local allowed, remaining, retry, reset, delay, x2, y2, z2, idle, e1, e2 = f(p, x, y, z, now, c, commit, log, lease)
  local rl, ru = '', ''
  if allowed and commit then
    if p.alg == CONCURRENCY then
      rl = lease
    end
    if before then
      ru = undo_token(p.alg, before, x2, y2, z2, c, e1, e2)
    end
  end
  return allowed, remaining, retry, reset, delay, x2, y2, z2, idle, rl, ru
end

-- A request of a check spanning several requests, read by load: its
-- parameters p, algorithm f, cost c, lease, undo field, keys, whether its
-- key existed, its state as read (x, y, z, e), its state now (sx, sy, sz,
-- idle) and its decision.
local function load(k, b, now)
  local p, c, lease, undo, key, log
  p, c, lease, undo, key, log, k = request(k, b)
  local alg = p.alg
  local x, y, z, e, existed, pw = state_of(p, now, read_state(alg, key))
  return {
    p = p, f = algorithms[alg], c = c, lease = lease, undo = undo, key = key, log = log, existed = existed, pw = pw,
    x = x, y = y, z = z, e = e, sx = x, sy = y, sz = z, idle = 0, commit = false,
    allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0, rl = '', ru = '',
  }, b + 1, k
end

-- save writes request r's state back (write_state) if it changed.
local function save(r, now)
  if r.idle > 0 or r.sx ~= r.x or r.sy ~= r.y or r.sz ~= r.z or r.pw and r.existed then
    write_state(r.p.alg, r.key, r.log, r.existed, r.sx, r.sy, r.sz, r.idle, r.e, now, r.x, r.y, r.pw)
  end
end
