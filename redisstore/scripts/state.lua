-- state.lua: reading requests and state, dispatching, writing state back.
--
-- Every script shares this contract. ARGV[1] is the time in µs since the
-- Unix epoch, or "" to use the server's TIME (the normal case: one clock for
-- every instance). ARGV[2] is the number n of requests. Each request names
-- its keys after those of the request before it (the first at KEYS[1]): a
-- hash holding its state (fields x, y, z, e, q as the algorithm uses them)
-- and, for sliding_log and concurrency only, a sorted set, its log. (A
-- request names no key that may not exist beside one that does: while a
-- Cluster slot migrates, Redis refuses such a script with TRYAGAIN.) Each
-- request sends two arguments after those of the request before it (the
-- first at ARGV[3]):
--
--   its limit, "<algorithm code>:<parameters>", the parameters in
--   hexadecimal and only those its algorithm reads:
--     fixed_window (1), sliding_log (2), sliding_window (3): N, P (µs)
--     token_bucket (4), gcra (5): A, B, Cap, Full
--     leaky_bucket (6): A, B, Cap, Full, NoDelay
--     warm_up (7): N, P (µs), Warm (µs)
--     concurrency (8): N, TTL (µs)
--   for example "5:1:1:f4240:f4240" (GCRA, 1e6 per second, burst 1e6);
--
--   its cost, or "<cost>,<lease id>,<undo>" when it has a lease or an undo
--   field. For take.lua, undo is "" or "1" to ask for an undo token (a check
--   spanning Redis Cluster slots may have to refund); for refund.lua it is
--   the token.
--
-- batch.lua takes several such argument lists (and key lists) one after
-- another, one per check.
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much

-- clock_of reads a clock argument: the time it holds, or, for "", the
-- server's TIME, read once per script (every check of a batch then decides
-- at the same instant, as one atomic script does).
local server_time = nil
local function clock_of(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  if not server_time then
    local t = redis.call('TIME')
    server_time = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_time
end

local function clock()
  return clock_of(ARGV[1])
end

-- The script's arguments, as locals: reading a global costs a lookup.
local argv, keys = ARGV, KEYS

-- plists caches each distinct limit argument of this call, parsed:
-- requests of one script mostly share a few limits, and a table lookup
-- costs a fraction of a pattern match, the tonumbers and a new table.
-- Nothing writes to a parameter table after params.
local plists = {}

-- params returns the parameters a limit argument holds:
-- "<algorithm>:<parameter>:...", the parameters being those listed above,
-- in hexadecimal: tonumber reads base 16 with strtoul, for a fraction of
-- what strtod costs it for base 10.
local function params(s)
  local p = plists[s]
  if p then
    return p
  end
  local a, v1, v2, v3, v4, v5 = string.match(s, '^(%d):(%x+):(%x+):?(%x*):?(%x*):?(%x*)$')
  local alg = tonumber(a)
  -- Built with every field it will hold, so that Lua sizes it once.
  p = {
    alg = alg, leaky = alg == 6, A = 0, B = 0, Cap = 0, Full = 0, back = 0, NoDelay = 0, N = 0, P = 0, Warm = 0, TTL = 0,
  }
  if alg >= 4 and alg <= 6 then
    p.A, p.B = tonumber(v1, 16), tonumber(v2, 16)
    p.Cap, p.Full = tonumber(v3, 16), tonumber(v4, 16)
    -- how far (µs) a clock may go back before the bucket must refuse
    -- whatever it holds (algo's backstop)
    p.back = cdiv(p.Full, p.A) + 1
    if alg == 6 then
      p.NoDelay = tonumber(v5, 16)
    end
  elseif alg == 8 then
    p.N, p.TTL = tonumber(v1, 16), tonumber(v2, 16)
  else
    p.N, p.P = tonumber(v1, 16), tonumber(v2, 16)
    if alg == 7 then
      p.Warm = tonumber(v3, 16)
    end
  end
  plists[s] = p
  return p
end

-- spare_state is a state table that a batch script is done with (see
-- check); load refills it rather than building a table.
local spare_state = nil

-- load reads the request whose arguments are ARGV[b] and ARGV[b + 1] and
-- whose keys start at KEYS[k], and its state. It returns its parameters,
-- its state (which also holds the request's cost, lease and undo field),
-- and where the next request's arguments and keys start. Only the fields
-- the algorithm uses are read and written (the others stay 0): every field
-- and every tonumber costs time on every call.
local function load(k, b)
  local p = params(argv[b])
  local alg = p.alg
  local cost, lease, undo = argv[b + 1], '', ''
  if cost == '1' then -- the usual request, without parsing
    cost = 1
  else
    local c, l, u = string.match(cost, '^(%d+),([^,]*),(.*)$')
    if c then
      cost, lease, undo = c, l, u
    end
    cost = tonumber(cost)
  end
  local key, log = keys[k], keys[k]
  if alg == 2 or alg == 8 then
    log = keys[k + 1]
    k = k + 2
  else
    k = k + 1
  end
  local st = spare_state
  if st then -- refilled: every field the constructor below sets
    spare_state = nil
    st.key, st.log, st.x, st.y, st.z, st.q, st.e, st.idle, st.dirty = key, log, 0, 0, 0, 0, 0, 0, false
    st.alg, st.existed, st.cost, st.lease, st.undo = alg, false, cost, lease, undo
  else
    st = {
      key = key, log = log, x = 0, y = 0, z = 0, q = 0, e = 0, idle = 0, dirty = false, alg = alg,
      existed = false, cost = cost, lease = lease, undo = undo,
    }
  end
  local v
  if alg == 8 then
    v = redis.call('HMGET', key, 'y', 'z')
    st.y, st.z = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  elseif alg == 2 then
    v = redis.call('HMGET', key, 'y', 'z', 'q')
    st.y, st.z, st.q = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  elseif alg == 3 then
    v = redis.call('HMGET', key, 'x', 'y', 'z', 'e', 'q')
    st.x, st.y, st.z = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
    st.e = v[5] == false and tonumber(v[4]) or 0
  else
    v = redis.call('HMGET', key, 'x', 'y', 'e', 'q')
    local y = v[2]
    if y == '0' then -- often: GCRA's remainder under a whole rate
      y = 0
    else
      y = tonumber(y) or 0
    end
    st.x, st.y = tonumber(v[1]) or 0, y
    st.e = v[4] == false and tonumber(v[3]) or 0
  end
  st.existed = v[1] ~= false
  return p, st, b + 2, k
end

-- copy returns a copy of state st (every field load sets).
local function copy(st)
  return {
    key = st.key, log = st.log, x = st.x, y = st.y, z = st.z, q = st.q, e = st.e,
    idle = st.idle, dirty = st.dirty, alg = st.alg, existed = st.existed,
    cost = st.cost, lease = st.lease, undo = st.undo,
  }
end

-- step decides request (p, st); cost 0 is a peek, as in algo.Step. The
-- table algorithms (sluice.Algorithm code -> function) is written by the
-- script assembler (scripts.go) before this file.
local function step(p, st, now, commit)
  local f = algorithms[p.alg]
  if st.cost == 0 then
    local probe = f(st, p, now, 1, false)
    local r = f(st, p, now, 0, false)
    r.allowed, r.retry, r.delay = probe.allowed, probe.retry, probe.delay
    return r
  end
  return f(st, p, now, st.cost, commit)
end

-- save writes a changed state back: the fields its algorithm uses. A state
-- charged by this script lives at least until it is fresh again (plus
-- SLACK_MS); a state only normalised (a window rolled over, a log pruned)
-- keeps its TTL.
--
-- The scalar algorithms (all but sliding_log and concurrency) also keep in
-- field e the time, on the script's clock, until which the key's TTL holds
-- it. A charge that needs the key no longer than that leaves the TTL alone:
-- no PEXPIRE, the costliest command of a decision. When the TTL must grow,
-- it is set to the need plus a headroom (SLACK_MS plus an eighth of the time
-- to freshness), so a busy key extends it about once a second instead of on
-- every request. A key also holding field q was written by an older sluice,
-- which sets TTLs without updating e: its e is not trusted.
local function save(st, now)
  if not st.dirty or (not st.existed and st.idle == 0) then
    return -- unchanged, or a fresh state nothing was charged to: keep no key
  end
  local alg = st.alg
  if alg == 2 or alg == 8 then
    if alg == 2 then
      redis.call('HSET', st.key, 'y', int(st.y), 'z', int(st.z), 'q', int(st.q))
    else
      redis.call('HSET', st.key, 'y', int(st.y), 'z', int(st.z))
    end
    if st.idle > 0 then
      local ttl = cdiv(max(st.idle - now, 0), 1000) + SLACK_MS
      redis.call('PEXPIRE', st.key, int(ttl))
      redis.call('PEXPIRE', st.log, int(ttl))
    end
    return
  end
  local e = 0
  if st.idle > 0 then
    local need = st.idle
    if need < now then
      need = now
    end
    need = need + SLACK_MS * 1000
    if st.e < need then
      e = need + SLACK_MS * 1000 + idiv(max(st.idle - now, 0), 8)
    end
  end
  if e > 0 then
    if alg == 3 then
      redis.call('HSET', st.key, 'x', int(st.x), 'y', int(st.y), 'z', int(st.z), 'e', int(e))
    else
      redis.call('HSET', st.key, 'x', int(st.x), 'y', int(st.y), 'e', int(e))
    end
    redis.call('PEXPIRE', st.key, int(cdiv(e - now, 1000)))
  elseif alg == 3 then
    redis.call('HSET', st.key, 'x', int(st.x), 'y', int(st.y), 'z', int(st.z))
  else
    redis.call('HSET', st.key, 'x', int(st.x), 'y', int(st.y))
  end
end

-- put appends results rs to out after index o and returns the new last
-- index: 6 integers per request (allowed, limit, remaining, retry, reset,
-- delay), or 8 values per request, the lease and undo token last, when any
-- request has a lease or an undo token (the shorter reply saves the server
-- two strings per decision). When marked, the stride itself comes first:
-- a batch script's reply is one flat array, the checks' results one after
-- another, which costs the server less than an array per check.
local function put(out, o, rs, marked)
  local stride = 6
  for i = 1, #rs do
    if rs[i].lease ~= '' or rs[i].undo ~= '' then
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
      allowed, r.limit, r.remaining, r.retry, r.reset, r.delay
    if stride == 8 then
      out[o + 7], out[o + 8] = r.lease, r.undo
    end
    o = o + stride
  end
  return o
end

-- reply returns results rs as a script's reply (see put).
local function reply(rs)
  local out = {}
  put(out, 0, rs, false)
  return out
end

-- put_one is put for one result, marked.
local function put_one(out, o, r)
  local allowed = 0
  if r.allowed then
    allowed = 1
  end
  if r.lease ~= '' or r.undo ~= '' then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8], out[o + 9] =
      8, allowed, r.limit, r.remaining, r.retry, r.reset, r.delay, r.lease, r.undo
    return o + 9
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
    6, allowed, r.limit, r.remaining, r.retry, r.reset, r.delay
  return o + 7
end

-- reply_one is reply for one result, built in one table constructor.
local function reply_one(r)
  local allowed = 0
  if r.allowed then
    allowed = 1
  end
  if r.lease ~= '' or r.undo ~= '' then
    return { allowed, r.limit, r.remaining, r.retry, r.reset, r.delay, r.lease, r.undo }
  end
  return { allowed, r.limit, r.remaining, r.retry, r.reset, r.delay }
end

-- check decides the n requests whose arguments start at ARGV[b] and whose
-- keys start at KEYS[k], all-or-nothing, at time now. Without out it
-- returns the reply (see reply); with out it appends the results to out
-- after index o with emit_one or emit, which are put_one and put (passed
-- in, so that a script not batching does not build them); then where the next check's arguments and
-- keys start, and the new last index of out.
--
-- One request is decided and charged in one pass; several are first decided
-- with their charges applied to copies of their states (or without
-- charging, for the log algorithms), and charged only if every one is
-- admitted. When the check is refused, a request that alone would have been
-- admitted reports its current state with allowed = 0 and no retry.
local function check(now, n, b, k, out, o, emit_one, emit)
  if n == 1 then -- the common case, without the tables a check needs
    local p, st
    p, st, b, k = load(k, b)
    local r
    if st.cost > 0 then
      r = algorithms[p.alg](st, p, now, st.cost, true)
    else
      r = step(p, st, now, true)
    end
    save(st, now)
    if out then
      -- Batched: the results are copied into out, and nothing else holds
      -- st or r, so the next request of the batch may refill them.
      o = emit_one(out, o, r)
      spare_state, spare_result = st, r
      return nil, b, k, o
    end
    return reply_one(r), b, k, o
  end
  local ps, sts, rs = {}, {}, {}
  for i = 1, n do
    ps[i], sts[i], b, k = load(k, b)
  end
  -- The first pass charges a copy of each scalar state (all algorithms but
  -- sliding_log and concurrency, whose charge writes their log at once), so
  -- that an admitted check keeps the copies instead of deciding each
  -- request a second time. A refused request's copy holds its state
  -- normalised and not charged, as the first pass leaves it.
  local all, charged = true, {}
  for i = 1, n do
    local p, st = ps[i], sts[i]
    if st.cost > 0 and st.alg ~= 2 and st.alg ~= 8 then
      charged[i] = copy(st)
      rs[i] = algorithms[p.alg](charged[i], p, now, st.cost, true)
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
      local cost = sts[i].cost
      sts[i].cost = 0
      rs[i] = step(ps[i], sts[i], now, false)
      sts[i].cost = cost
      rs[i].allowed, rs[i].retry, rs[i].delay = false, 0, 0
    end
  end
  for i = 1, n do
    save(sts[i], now)
  end
  if out then
    return nil, b, k, emit(out, o, rs, true)
  end
  return reply(rs), b, k, o
end
