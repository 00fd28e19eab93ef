-- check.lua: a check of several requests decided all-or-nothing.

-- chain decides, in locals, request i of the n of a check of plain
-- requests (see many), whose argument is argv[b] and key keys[k], and, by
-- calling itself, those after it; its results go to reply[r + 1] to
-- reply[r + 6]. before tells whether every request before it was
-- admitted. It returns whether the whole check is. A request is decided with its charge in the
-- state returned (a scalar algorithm touches nothing in Redis), then,
-- once the check's fate is known, written back charged, or, if the check
-- is refused, reported and written as a peek if it alone was admitted,
-- as decided if not. A call per request costs the server less than
-- keeping the request's dozen values in a table.
local function chain(now, n, i, b, k, reply, r, before)
  local a = argv[b]
  local p, c = plists[a], 1
  if not p then
    p, c = limit_arg(a)
  end
  local alg, key = p.alg, keys[k]
  local x, y, z, e, existed, pw = state_of(p, now, read_state(alg, key))
  local allowed, remaining, retry, reset, delay, x2, y2, z2, idle = algorithms[alg](p, x, y, z, now, c, true)
  local all = before and allowed
  if i < n then
    all = chain(now, n, i + 1, b + 1, k + 1, reply, r + 6, all)
  end
  local v = 0
  if all then
    v = 1
  elseif allowed then
    local _
    _, remaining, _, reset, _, x2, y2, z2, idle = peek(algorithms[alg], p, x, y, z, now)
    retry, delay = 0, 0
  end
  if idle > 0 or x2 ~= x or y2 ~= y or z2 ~= z or pw and existed then
    write_state(alg, key, nil, existed, x2, y2, z2, idle, e, now, x, y, pw)
  end
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5], reply[r + 6] =
    v, p.limit, remaining, retry, reset, delay
  return all
end

-- many decides a check of n requests as check does, when every one is
-- plain: a scalar algorithm (not sliding_log, not concurrency), a cost
-- above 0, no undo token asked, and a key of its own; the common composite
-- (global, per-IP and per-user limits). It returns false, having read and
-- written nothing, when one is not (or n is above 64, the depth chain
-- would reach).
local function many(now, n, b, k, out, o)
  if n > 64 then
    return false
  end
  for i = 0, n - 1 do
    local a = argv[b + i]
    local p, c, undo = plists[a], 1, ''
    if not p then
      local _
      p, c, _, undo = limit_arg(a)
    end
    local alg = p.alg
    if c == 0 or undo ~= '' or alg == SLIDING_LOG or alg == CONCURRENCY then
      return false
    end
    local key = keys[k + i]
    for j = 0, i - 1 do
      if keys[k + j] == key then
        return false
      end
    end
  end
  if out then
    out[o + 1] = 6
    chain(now, n, 1, b, k, out, o + 1, true)
    return nil, b + n, k + n, o + 1 + 6 * n
  end
  local reply
  if n <= 4 then
    -- sized at once (a table grown one value at a time is resized five
    -- times on the way to 18); the first nil ends the reply
    reply = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
    reply[6 * n + 1] = nil
  else
    reply = {}
  end
  chain(now, n, 1, b, k, reply, 0, true)
  return reply, b + n, k + n, o
end

-- check decides the n requests whose arguments start at ARGV[b] and whose
-- keys start at KEYS[k], all-or-nothing, at time now. Without out it
-- returns the reply (see emit); with out it appends the results to out
-- after index o, marked; then where the next check's arguments and keys
-- start, and the new last index of out.
--
-- One request is decided and charged in one pass, in locals; several
-- plain ones (the usual composite) by many, in one pass too. Otherwise
-- they are first decided with the scalar ones charged only in the states
-- returned (the log algorithms, which write their log at once, without
-- charging), and charged only if every one is admitted. When the check is
-- refused, a request that alone would have been admitted reports its
-- current state with allowed = 0 and no retry.
local function check(now, n, b, k, out, o)
  if n == 1 then -- the common case, without a table per request
    -- request(k, b), written out: the call and its seven values cost 3%
    -- of a batched decision (callgrind, 58.2k against 60.0k instructions).
    local a = argv[b]
    local p, c, lease, undo = plists[a], 1, '', ''
    if not p then
      p, c, lease, undo = limit_arg(a)
    end
    local alg = p.alg
    local key, log = keys[k], nil
    if alg == SLIDING_LOG or alg == CONCURRENCY then
      log = keys[k + 1]
      k = k + 2
    else
      k = k + 1
    end
    -- In a batch, a scalar key's state is held from one single check to
    -- the next of the same key (held in stateio.lua): one read and one
    -- write for a run of checks of a hot key.
    local hold, x, y, z, e, existed, pw = nil
    if out and not log then
      local na = argv[b + 1]
      if na ~= nil and #na >= 5 and keys[k] == key then -- the next check: a single one, on this key
        hold = true
      elseif held == key then
        hold = false -- the run's last check
      end
    end
    if hold ~= nil then
      x, y, z, e, existed, pw = held_state(p, key, now)
    else
      x, y, z, e, existed, pw = state_of(p, now, read_state(alg, key))
    end
    local allowed, remaining, retry, reset, delay, x2, y2, z2, idle, rl, ru
    if c > 0 and undo == '' and alg ~= CONCURRENCY then
      allowed, remaining, retry, reset, delay, x2, y2, z2, idle = algorithms[alg](p, x, y, z, now, c, true, log)
      rl, ru = '', ''
    else
      allowed, remaining, retry, reset, delay, x2, y2, z2, idle, rl, ru =
        take(algorithms[alg], p, existed, x, y, z, now, c, true, log, lease, undo)
    end
    if idle > 0 or x2 ~= x or y2 ~= y or z2 ~= z or pw and existed then
      write_state(alg, key, log, existed, x2, y2, z2, idle, e, now, x, y, pw, hold)
    elseif hold == false then
      flush()
    end
    local a = 0
    if allowed then
      a = 1
    end
    if out then
      if rl ~= '' or ru ~= '' then
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8], out[o + 9] =
          8, a, p.limit, remaining, retry, reset, delay, rl, ru
        return nil, b + 1, k, o + 9
      end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
        6, a, p.limit, remaining, retry, reset, delay
      return nil, b + 1, k, o + 7
    end
    if rl ~= '' or ru ~= '' then
      return { a, p.limit, remaining, retry, reset, delay, rl, ru }, b + 1, k, o
    end
    local v = packed(alg, p.limit, allowed, remaining, retry, reset, delay)
    if v then
      return v, b + 1, k, o
    end
    return { a, p.limit, remaining, retry, reset, delay }, b + 1, k, o
  end
  local reply, b2, k2, o2 = many(now, n, b, k, out, o)
  if reply ~= false then
    return reply, b2, k2, o2
  end
  local rs = {}
  for i = 1, n do
    rs[i], b, k = load(k, b, now)
  end
  local all = true
  for i = 1, n do
    local r = rs[i]
    r.commit = r.c > 0 and r.p.alg ~= SLIDING_LOG and r.p.alg ~= CONCURRENCY
    r.allowed, r.remaining, r.retry, r.reset, r.delay, r.sx, r.sy, r.sz, r.idle, r.rl, r.ru =
      take(r.f, r.p, r.existed, r.x, r.y, r.z, now, r.c, r.commit, r.log, r.lease, r.undo)
    all = all and r.allowed
  end
  for i = 1, n do
    local r = rs[i]
    if all then
      if not r.commit then -- a log algorithm or a peek: charged (or peeked) now
        r.allowed, r.remaining, r.retry, r.reset, r.delay, r.sx, r.sy, r.sz, r.idle, r.rl, r.ru =
          take(r.f, r.p, r.existed, r.sx, r.sy, r.sz, now, r.c, true, r.log, r.lease, r.undo)
      end
    elseif r.allowed then
      -- admitted alone, refused with the check: its state uncharged, as a
      -- peek reports it (a scalar request's state from before the first
      -- pass charged it)
      local x, y, z = r.sx, r.sy, r.sz
      if r.commit then
        x, y, z = r.x, r.y, r.z
      end
      r.allowed, r.remaining, r.retry, r.reset, r.delay, r.sx, r.sy, r.sz, r.idle =
        peek(r.f, r.p, x, y, z, now, r.log, r.lease)
      r.allowed, r.retry, r.delay, r.rl, r.ru = false, 0, 0, '', ''
    end
    -- refused: the first pass's decision and state, not charged
  end
  for i = 1, n do
    save(rs[i], now)
  end
  if out then
    return nil, b, k, emit(out, o, rs, true)
  end
  local reply = {}
  emit(reply, 0, rs, false)
  return reply, b, k, o
end
