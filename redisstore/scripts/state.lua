-- state.lua: reading requests and state, dispatching, writing state back.
--
-- Every script shares this contract. ARGV[1] is the time in µs since the
-- Unix epoch, or "" to use the server's TIME (the normal case: one clock for
-- every instance). ARGV[2] is the number n of requests. Request i has two
-- keys, KEYS[2i-1] (a hash holding the state: fields x, y, z, q as the
-- algorithm uses them) and KEYS[2i] (a sorted set, the log of sliding_log
-- and concurrency; for the other algorithms, which keep no log, the state
-- key again, so that a request names no key that cannot exist: while a
-- Cluster slot migrates, Redis refuses a script naming a missing key with
-- TRYAGAIN). Its arguments follow those of request i-1 (the first at
-- ARGV[3]): algorithm code, cost, lease id, undo, then only the parameters
-- its algorithm reads:
--
--   fixed_window (1), sliding_log (2), sliding_window (3): N, P (µs)
--   token_bucket (4), gcra (5): A, B, Cap, Full
--   leaky_bucket (6): A, B, Cap, Full, NoDelay
--   warm_up (7): N, P (µs), Warm (µs)
--   concurrency (8): N, TTL (µs)
--
-- For take.lua, undo is "" or "1" to ask for an undo token (a check spanning
-- Redis Cluster slots may have to refund); for refund.lua it is the token.
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much

local function clock()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load reads request i, whose arguments start at ARGV[b], and its state;
-- it returns them and where request i+1 starts. Only the fields the
-- algorithm uses are read and written (the others stay 0): every field and
-- every tonumber costs time on every call.
local function load(i, b)
  local alg = tonumber(ARGV[b])
  -- Each table is built with every field it will hold, so that Lua sizes
  -- it once instead of growing it field by field.
  local p = {
    alg = alg, cost = tonumber(ARGV[b + 1]), lease = ARGV[b + 2], undo = ARGV[b + 3], leaky = alg == 6,
    A = 0, B = 0, Cap = 0, Full = 0, NoDelay = 0, N = 0, P = 0, Warm = 0, TTL = 0,
  }
  local key = KEYS[2 * i - 1]
  local st = {
    key = key, log = KEYS[2 * i], x = 0, y = 0, z = 0, q = 0, e = 0, idle = 0, dirty = false, alg = alg,
    existed = false,
  }
  local v
  if alg >= 4 and alg <= 6 then
    p.A, p.B = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    p.Cap, p.Full = tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
    b = b + 8
    if alg == 6 then
      p.NoDelay = tonumber(ARGV[b])
      b = b + 1
    end
    v = redis.call('HMGET', key, 'x', 'y', 'e', 'q')
    st.x, st.y = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    st.e = v[4] == false and tonumber(v[3]) or 0
  elseif alg == 8 then
    p.N, p.TTL = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    b = b + 6
    v = redis.call('HMGET', key, 'y', 'z')
    st.y, st.z = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  else
    p.N, p.P = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    b = b + 6
    if alg == 7 then
      p.Warm = tonumber(ARGV[b])
      b = b + 1
    end
    if alg == 2 then
      v = redis.call('HMGET', key, 'y', 'z', 'q')
      st.y, st.z, st.q = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
    elseif alg == 3 then
      v = redis.call('HMGET', key, 'x', 'y', 'z', 'e', 'q')
      st.x, st.y, st.z = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
      st.e = v[5] == false and tonumber(v[4]) or 0
    else
      v = redis.call('HMGET', key, 'x', 'y', 'e', 'q')
      st.x, st.y = tonumber(v[1]) or 0, tonumber(v[2]) or 0
      st.e = v[4] == false and tonumber(v[3]) or 0
    end
  end
  st.existed = v[1] ~= false
  return p, st, b
end

-- copy returns a copy of state st (every field load sets).
local function copy(st)
  return {
    key = st.key, log = st.log, x = st.x, y = st.y, z = st.z, q = st.q, e = st.e,
    idle = st.idle, dirty = st.dirty, alg = st.alg, existed = st.existed,
  }
end

-- step decides request (p, st); cost 0 is a peek, as in algo.Step. The
-- table algorithms (sluice.Algorithm code -> function) is written by the
-- script assembler (scripts.go) before this file.
local function step(p, st, now, commit)
  local f = algorithms[p.alg]
  if p.cost == 0 then
    local probe = f(st, p, now, 1, false)
    local r = f(st, p, now, 0, false)
    r.allowed, r.retry, r.delay = probe.allowed, probe.retry, probe.delay
    return r
  end
  return f(st, p, now, p.cost, commit)
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
      redis.call('HSET', st.key, 'y', st.y, 'z', st.z, 'q', st.q)
    else
      redis.call('HSET', st.key, 'y', st.y, 'z', st.z)
    end
    if st.idle > 0 then
      local ttl = cdiv(math.max(st.idle - now, 0), 1000) + SLACK_MS
      redis.call('PEXPIRE', st.key, ttl)
      redis.call('PEXPIRE', st.log, ttl)
    end
    return
  end
  local e = 0
  if st.idle > 0 then
    local need = math.max(st.idle, now) + SLACK_MS * 1000
    if st.e < need then
      e = need + SLACK_MS * 1000 + idiv(math.max(st.idle - now, 0), 8)
    end
  end
  if e > 0 then
    if alg == 3 then
      redis.call('HSET', st.key, 'x', st.x, 'y', st.y, 'z', st.z, 'e', e)
    else
      redis.call('HSET', st.key, 'x', st.x, 'y', st.y, 'e', e)
    end
    redis.call('PEXPIRE', st.key, cdiv(e - now, 1000))
  elseif alg == 3 then
    redis.call('HSET', st.key, 'x', st.x, 'y', st.y, 'z', st.z)
  else
    redis.call('HSET', st.key, 'x', st.x, 'y', st.y)
  end
end

-- reply flattens results: 6 integers per request (allowed, limit,
-- remaining, retry, reset, delay), or 8 values per request, the lease and
-- undo token last, when any request has a lease or an undo token. The
-- shorter reply saves the server two strings per decision.
local function reply(rs)
  local stride = 6
  for i = 1, #rs do
    if rs[i].lease ~= '' or rs[i].undo ~= '' then
      stride = 8
    end
  end
  local out, k = {}, 0
  for i = 1, #rs do
    local r = rs[i]
    local allowed = 0
    if r.allowed then
      allowed = 1
    end
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] =
      allowed, r.limit, r.remaining, r.retry, r.reset, r.delay
    if stride == 8 then
      out[k + 7], out[k + 8] = r.lease, r.undo
    end
    k = k + stride
  end
  return out
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
