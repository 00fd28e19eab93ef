-- args.lua: what every entry point is sent, and reading it.
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
  wire(alg, p, v1, v2, v3, v4, v5) -- algorithms.lua
  if alg == TOKEN_BUCKET or alg == GCRA or alg == LEAKY_BUCKET then
    p.limit = p.Cap
    -- how far (µs) a clock may go back before the bucket must refuse
    -- whatever it holds (algo's backstop)
    p.back = cdiv(p.Full, p.A) + 1
    if v6 then -- a leaky bucket's request bounding its delay
      p.MaxDelay = tonumber(v6, 16)
      p.canon = string.match(s, '^(.*):%x+$') -- a request's bound is no parameter of the state
    end
  elseif alg == WARM_UP then
    p.limit = 1
  else
    p.limit = p.N
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
