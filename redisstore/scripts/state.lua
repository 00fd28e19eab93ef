-- state.lua: reading requests and state, dispatching, writing state back.
--
-- Every script shares this contract. ARGV[1] is the time in µs since the
-- Unix epoch, or "" to use the server's TIME (the normal case: one clock for
-- every instance). ARGV[2] is the number n of requests. Request i has two
-- keys, KEYS[2i-1] (a hash holding the state: fields x, y, z, q) and KEYS[2i]
-- (a sorted set, the log of sliding_log and concurrency), and FIELDS
-- arguments from ARGV[3 + (i-1)*FIELDS]: algorithm code, N, P (µs), A, B,
-- Cap, Full, NoDelay, Warm (µs), TTL (µs), cost, lease id, undo. For
-- take.lua, undo is "" or "1" to ask for an undo token (a check spanning
-- Redis Cluster slots may have to refund); for refund.lua it is the token.
local FIELDS = 13
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much

local function clock()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function load(i)
  local b = 2 + (i - 1) * FIELDS
  local alg = tonumber(ARGV[b + 1])
  -- Parse only what the algorithm reads: every tonumber costs time on
  -- every call.
  local p = { alg = alg, cost = tonumber(ARGV[b + 11]), undo = ARGV[b + 13], leaky = alg == 6 }
  if alg >= 4 and alg <= 6 then
    p.A, p.B = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    p.Cap, p.Full = tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
    if alg == 6 then
      p.NoDelay = tonumber(ARGV[b + 8])
    end
  else
    p.N = tonumber(ARGV[b + 2])
    if alg == 8 then
      p.TTL, p.lease = tonumber(ARGV[b + 10]), ARGV[b + 12]
    else
      p.P = tonumber(ARGV[b + 3])
      if alg == 7 then
        p.Warm = tonumber(ARGV[b + 9])
      end
    end
  end
  local key, log = KEYS[2 * i - 1], KEYS[2 * i]
  local v = redis.call('HMGET', key, 'x', 'y', 'z', 'q')
  local st = {
    key = key, log = log, existed = v[1] ~= false,
    x = tonumber(v[1]) or 0, y = tonumber(v[2]) or 0, z = tonumber(v[3]) or 0, q = tonumber(v[4]) or 0,
    idle = 0, dirty = false, logged = alg == 2 or alg == 8,
  }
  return p, st
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

-- save writes a changed state back. A state charged by this script lives
-- until it is fresh again (plus SLACK_MS); a state only normalised (a window
-- rolled over, a log pruned) keeps its TTL.
local function save(st, now)
  if not st.dirty or (not st.existed and st.idle == 0) then
    return -- unchanged, or a fresh state nothing was charged to: keep no key
  end
  redis.call('HSET', st.key, 'x', st.x, 'y', st.y, 'z', st.z, 'q', st.q)
  local ttl = -1
  if st.idle > 0 then
    ttl = cdiv(math.max(st.idle - now, 0), 1000) + SLACK_MS
  end
  if ttl > 0 then
    redis.call('PEXPIRE', st.key, ttl)
    if st.logged then
      redis.call('PEXPIRE', st.log, ttl)
    end
  end
end

-- reply flattens results: 8 values per request.
local function reply(rs)
  local out, k = {}, 0
  for i = 1, #rs do
    local r = rs[i]
    local allowed = 0
    if r.allowed then
      allowed = 1
    end
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = allowed, r.limit, r.remaining, r.retry
    out[k + 5], out[k + 6], out[k + 7], out[k + 8] = r.reset, r.delay, r.lease, r.undo
    k = k + 8
  end
  return out
end
