-- state.lua: reading requests and state, dispatching, writing state back.
--
-- Every entry point (a script, or a function of the library: there KEYS
-- and ARGV are its two parameters) shares this contract. ARGV[1] is the
-- time in µs since the Unix epoch, or "" to use the server's TIME (the
-- normal case: one clock for every instance). Then comes the number n of
-- requests: always for refund.lua and release.lua, for take.lua only when
-- n > 1 (a limit argument is never shorter than 5 characters, a count is;
-- every argument costs the server time). Each request names its keys after
-- those of the request before it (the first at KEYS[1]): a hash holding
-- its state (fields x, y, z, e, q as the algorithm uses them) and, for
-- sliding_log and concurrency only, a sorted set, its log. (A request
-- names no key that may not exist beside one that does: while a Cluster
-- slot migrates, Redis refuses such a script with TRYAGAIN.) Each request
-- sends one argument after that of the request before it (the first after
-- the count, or after the clock when there is none): its limit,
-- "<algorithm code>:<parameters>", as algorithms.lua lists them (generated
-- from the algorithm table, internal/algo/desc.go), for example
-- "5:1:1:f4240:f4240" (GCRA, 1e6 per second, burst 1e6).
-- MaxDelay is the request's bound on its delay (sluice.Request.MaxDelay),
-- sent only when it has one: it rides with the limit, where every path
-- reads it, and a caller's bound is usually the same on every request, so
-- the parsed argument is cached as the limit's is. Then,
-- unless its cost is 1 and it has no lease and no undo field, "|<cost>" or
-- "|<cost>,<lease id>,<undo>". For take.lua, undo is "" or "1" to ask for
-- an undo token (a check spanning Redis Cluster slots may have to refund);
-- for refund.lua it is the token. (One argument per request: each costs the
-- server about 1.6k instructions before the Lua starts.)
--
-- batch.lua takes one clock, then the requests of several checks one after
-- another (see there).
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much
local REUSE_MS = 10000 -- and a key charged again extends its TTL by this much more

-- The call's keys and arguments, and the server's time once read: set by
-- the entry point at every call (from KEYS and ARGV in a script, from its
-- parameters in a function of the library; see scripts.go). Locals, so
-- that reading them costs no global lookup.
local keys, argv, server_time = nil, nil, nil

-- clock_of reads a clock argument: the time it holds, or, for "", the
-- server's TIME, read once per call (every check of a batch then decides
-- at the same instant, as one atomic script does).
local function clock_of(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  if not server_time then
    local t = redis.call('TIME')
    server_time = t[1] * 1000000 + t[2] -- strings, converted by the arithmetic (see read_state)
  end
  return server_time
end

local function clock()
  return clock_of(argv[1])
end

-- plists caches each distinct limit argument, parsed: requests of one call
-- mostly share a few limits, and a table lookup costs a fraction of a
-- pattern match, the tonumbers and a new table. A script starts with an
-- empty cache at every call; the function library keeps it from call to
-- call (a limit argument always means the same parameters), emptied when
-- it reaches MAX_PLISTS limits. Nothing writes to a parameter table after
-- params.
local plists, nplists, MAX_PLISTS = {}, 0, 1024

-- params returns the parameters a limit argument holds, parsed:
-- hexadecimal, which tonumber reads with strtoul, for a fraction of what
-- strtod costs it for base 10. limit is what a decision reports as its
-- limit.
local function params(s)
  local p = plists[s]
  if p then
    return p
  end
  local alg = string.byte(s, 1) - 48
  local pattern = patterns[alg]
  local v1, v2, v3, v4, v5, v6
  if pattern then
    v1, v2, v3, v4, v5 = string.match(s, pattern)
  end
  if not v1 and alg == LEAKY_BUCKET then
    v1, v2, v3, v4, v5, v6 = string.match(s, bounded_leaky_bucket)
  end
  local bounds = false
  if not v1 and alg == FIXED_WINDOW then
    v1, v2, v3, v4, v5 = string.match(s, calendar_fixed_window)
    if v1 then
      bounds = { tonumber(v2, 16), tonumber(v3, 16), tonumber(v4, 16), tonumber(v5, 16) }
      v2 = '0'
    end
  end
  if not v1 then
    error('sluice: malformed limit argument "' .. s .. '"')
  end
  -- Built with every field it will hold, so that Lua sizes it once.
  p = {
    alg = alg, limit = 0, leaky = alg == LEAKY_BUCKET, A = 0, B = 0, Cap = 0, Full = 0, back = 0, NoDelay = 0, MaxDelay = -1,
    N = 0, P = 0, Warm = 0, TTL = 0, bounds = bounds, canon = s,
  }
  if alg == TOKEN_BUCKET or alg == GCRA or alg == LEAKY_BUCKET then
    p.A, p.B = tonumber(v1, 16), tonumber(v2, 16)
    p.Cap, p.Full = tonumber(v3, 16), tonumber(v4, 16)
    p.limit = p.Cap
    -- how far (µs) a clock may go back before the bucket must refuse
    -- whatever it holds (algo's backstop)
    p.back = cdiv(p.Full, p.A) + 1
    if alg == LEAKY_BUCKET then
      p.NoDelay = tonumber(v5, 16)
      if v6 then
        p.MaxDelay = tonumber(v6, 16)
        p.canon = string.match(s, '^(.*):%x+$') -- a request's bound is no parameter of the state
      end
    end
  elseif alg == CONCURRENCY then
    p.N, p.TTL = tonumber(v1, 16), tonumber(v2, 16)
    p.limit = p.N
  else
    p.N, p.P = tonumber(v1, 16), tonumber(v2, 16)
    p.limit = p.N
    if alg == WARM_UP then
      p.Warm = tonumber(v3, 16)
      p.limit = 1
    end
  end
  if nplists == MAX_PLISTS then
    plists, nplists = {}, 0
  end
  plists[s], nplists = p, nplists + 1
  return p
end

-- limit_arg reads a request's argument: its parameters, cost, lease and
-- undo field. Only plain limits are cached (a lease or an undo token makes
-- every argument different).
local function limit_arg(a)
  local p = plists[a]
  if p then -- the usual request: cached, cost 1
    return p, 1, '', ''
  end
  local bar = string.find(a, '|', 1, true)
  if not bar then
    return params(a), 1, '', ''
  end
  local s, c, l, u = string.sub(a, bar + 1), nil, '', ''
  a = string.sub(a, 1, bar - 1)
  p = plists[a] or params(a)
  c, l, u = string.match(s, '^(%d+),([^,]*),(.*)$')
  if c then
    return p, tonumber(c), l, u
  end
  c = tonumber(s)
  if not c then
    error('sluice: malformed cost "' .. s .. '"')
  end
  return p, c, '', ''
end

-- request reads the argument and keys of the request whose argument is
-- ARGV[b] and whose keys start at KEYS[k]: its parameters,
-- cost, lease and undo field, its state key and log key (nil unless its
-- algorithm keeps a log), and where the next request's keys start.
local function request(k, b)
  local p, c, lease, undo = limit_arg(argv[b])
  if p.alg == SLIDING_LOG or p.alg == CONCURRENCY then
    return p, c, lease, undo, keys[k], keys[k + 1], k + 2
  end
  return p, c, lease, undo, keys[k], nil, k + 1
end

-- read_state reads a request's state hash: x, y, z (see each algorithm),
-- e (the time until which the key's TTL holds it, see write_state) and
-- whether the key exists. Only the fields the algorithm uses are read:
-- every field and every conversion costs time on every call. A field is
-- converted by arithmetic ((v or 0) + 0, a missing field being false),
-- which parses its digits once, where tonumber parses them twice (Lua 5.1
-- checks, then converts); a field that is not a number, which sluice never
-- writes, makes the call fail rather than read as a fresh state.
local function read_state(alg, key)
  local v
  if alg == CONCURRENCY then
    v = redis.call('HMGET', key, 'y', 'z')
    return 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false
  elseif alg == SLIDING_LOG then
    v = redis.call('HMGET', key, 'y', 'z', 'q')
    return (v[3] or 0) + 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false
  elseif alg == SLIDING_WINDOW then
    v = redis.call('HMGET', key, 'x', 'y', 'z', 'e', 'q', 'p')
    return (v[1] or 0) + 0, (v[2] or 0) + 0, (v[3] or 0) + 0, v[5] == false and (v[4] or 0) + 0 or 0, v[1] ~= false, v[6]
  end
  v = redis.call('HMGET', key, 'x', 'y', 'e', 'q', 'p')
  local y = v[2]
  if y == '0' then -- often: GCRA's remainder under a whole rate
    y = 0
  else
    y = (y or 0) + 0
  end
  return (v[1] or 0) + 0, y, 0, v[4] == false and (v[3] or 0) + 0 or 0, v[1] ~= false, v[5]
end

-- same_periods tells whether o and p are one calendar window's arguments
-- (same N) sent from different periods: their bounds share a period (a
-- consecutive pair). An argument carries no unit or zone, so shared bounds
-- are what identify the calendar; two zones with the same midnights are
-- the same periods.
local function same_periods(o, p)
  if not (o.bounds and p.bounds) or o.N ~= p.N then
    return false
  end
  local a, b = o.bounds, p.bounds
  for i = 1, 3 do
    for j = 1, 3 do
      if a[i] == b[j] and a[i + 1] == b[j + 1] then
        return true
      end
    end
  end
  return false
end

-- state reads the state of a request under parameters p (read_state) and
-- carries it over to p if it was written under others (adopt.lua): the
-- state, e, whether the key existed, and what write_state must store in
-- field p, the parameters the state is kept under (p.canon for a key that
-- is new or carried over, false otherwise). sliding_log and concurrency
-- keep no field p: their state reads the same under any parameters.
local function state(p, key, now)
  local alg = p.alg
  local x, y, z, e, existed, ps = read_state(alg, key)
  if alg == SLIDING_LOG or alg == CONCURRENCY then
    return x, y, z, e, existed, false
  end
  if not existed then
    return x, y, z, e, existed, p.canon
  end
  if ps and ps ~= p.canon then
    local o = params(ps)
    if same_periods(o, p) then
      -- the same calendar limit, sent by an instance in another period:
      -- no change to carry over; the stored bounds follow the later one
      if p.bounds[1] > o.bounds[1] then
        return x, y, z, e, existed, p.canon
      end
      return x, y, z, e, existed, false
    end
    x, y, z = adopt(o, p, x, y, z, now)
    return x, y, z, e, existed, p.canon
  end
  return x, y, z, e, existed, false
end

-- write_state writes a changed state back: the fields its algorithm uses.
-- A state charged by this script (idle > 0) lives at least until it is
-- fresh again (plus SLACK_MS); a state only brought up to date (a window
-- rolled over, a log pruned) keeps its TTL, and a key that did not exist
-- is not created for it.
--
-- The scalar algorithms (all but sliding_log and concurrency) also keep in
-- field e the time, on the script's clock, until which the key's TTL holds
-- it (read as e). A charge that needs the key no longer than that leaves
-- the TTL alone: no PEXPIRE, the costliest command of a decision. When the
-- TTL must grow, it is set to the need plus a headroom: SLACK_MS plus an
-- eighth of the time to freshness, plus REUSE_MS for a key that existed (a
-- key in use, which would otherwise pay PEXPIRE on every request that
-- comes more than a second after the last): a key used again extends its
-- TTL about once every REUSE_MS, and lingers at most that much longer
-- after its last request; a key used once keeps the short TTL. A key also holding field q was
-- written by an older sluice, which sets TTLs without updating e: its e is
-- not trusted (read_state returns 0).
local function write_state(alg, key, log, existed, x, y, z, idle, e, now, ox, oy, pw)
  if not existed and idle == 0 then
    return
  end
  if pw and existed then -- carried over: kept until fresh under its new limit
    local a = adopted_idle(params(pw), x, y, z)
    if a > idle then
      idle = a
    end
  end
  if alg == SLIDING_LOG or alg == CONCURRENCY then
    if alg == SLIDING_LOG then
      redis.call('HSET', key, 'y', int(y), 'z', int(z), 'q', int(x))
    else
      redis.call('HSET', key, 'y', int(y), 'z', int(z))
    end
    if idle > 0 then
      local ttl = int(cdiv(max(idle - now, 0), 1000) + SLACK_MS)
      redis.call('PEXPIRE', key, ttl)
      redis.call('PEXPIRE', log, ttl)
    end
    return
  end
  -- Only the fields that changed (every field costs the server time): a
  -- GCRA charge mostly moves x alone, a fixed window's y alone. ox and oy
  -- are x and y as read. (x is rarely 0, y often is; the TTL arithmetic
  -- need not be exact, only never short, so it does without idiv's
  -- correction.)
  local sx, sy = false, false
  if x ~= ox or not existed then
    sx = format('%d', x)
  end
  if y ~= oy or not existed then
    sy = int(y)
  end
  local until_ = 0
  if idle > 0 then
    local need = idle
    if need < now then
      need = now
    end
    need = need + SLACK_MS * 1000
    if e < need then
      until_ = need + SLACK_MS * 1000
      if existed then
        until_ = until_ + REUSE_MS * 1000
      end
      if idle > now then
        until_ = until_ + floor((idle - now) / 8)
      end
    end
  end
  if pw then -- parameters new or changed: every field, and p, in one command
    sx, sy = format('%d', x), int(y)
    local se = format('%d', max(until_, e))
    if alg == SLIDING_WINDOW then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'p', pw, 'e', se)
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'p', pw, 'e', se)
    end
  elseif alg == SLIDING_WINDOW then -- the sliding window writes all three
    sx, sy = format('%d', x), int(y)
    if until_ > 0 then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'e', format('%d', until_))
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z))
    end
  elseif until_ > 0 then
    local se = format('%d', until_)
    if sx and sy then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'e', se)
    elseif sx then
      redis.call('HSET', key, 'x', sx, 'e', se)
    elseif sy then
      redis.call('HSET', key, 'y', sy, 'e', se)
    else
      redis.call('HSET', key, 'e', se)
    end
  elseif sx and sy then
    redis.call('HSET', key, 'x', sx, 'y', sy)
  elseif sx then
    redis.call('HSET', key, 'x', sx)
  elseif sy then
    redis.call('HSET', key, 'y', sy)
  end
  if until_ > 0 then
    redis.call('PEXPIRE', key, format('%d', floor((until_ - now) / 1000) + 1))
  end
end

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
  local x, y, z, e, existed, pw = state(p, key, now)
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

-- emit appends the decisions of requests rs to out after index o and
-- returns the new last index: 6 values per request (allowed, limit,
-- remaining, retry, reset, delay), or 8, the lease and undo token last,
-- when any request has a lease or an undo token (the shorter reply saves
-- the server two strings per decision). When marked, the stride itself
-- comes first: a batch script's reply is one flat array, the checks'
-- results one after another, which costs the server less than an array
-- per check.
local function emit(out, o, rs, marked)
  local stride = 6
  for i = 1, #rs do
    if rs[i].rl ~= '' or rs[i].ru ~= '' then
      stride = 8
    end
  end
  if marked then
    o = o + 1
    out[o] = stride
  end
  for i = 1, #rs do
    local r = rs[i]
    local allowed = 0
    if r.allowed then
      allowed = 1
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] =
      allowed, r.p.limit, r.remaining, r.retry, r.reset, r.delay
    if stride == 8 then
      out[o + 7], out[o + 8] = r.rl, r.ru
    end
    o = o + stride
  end
  return o
end

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
  local x, y, z, e, existed, pw = state(p, key, now)
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
    local x, y, z, e, existed, pw = state(p, key, now)
    local allowed, remaining, retry, reset, delay, x2, y2, z2, idle, rl, ru
    if c > 0 and undo == '' and alg ~= CONCURRENCY then
      allowed, remaining, retry, reset, delay, x2, y2, z2, idle = algorithms[alg](p, x, y, z, now, c, true, log)
      rl, ru = '', ''
    else
      allowed, remaining, retry, reset, delay, x2, y2, z2, idle, rl, ru =
        take(algorithms[alg], p, existed, x, y, z, now, c, true, log, lease, undo)
    end
    if idle > 0 or x2 ~= x or y2 ~= y or z2 ~= z or pw and existed then
      write_state(alg, key, log, existed, x2, y2, z2, idle, e, now, x, y, pw)
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
