-- lib.lua: helpers shared by every sluice script. Credit: the arithmetic
-- mirrors sluice's Go package internal/algo line by line; read that file for
-- the reasoning. All numbers are integers below 2^53, where Lua's doubles
-- are exact; idiv corrects the rare off-by-one of a rounded division.

-- The math functions as locals: a global and a field lookup less per call.
local floor, max, min = math.floor, math.max, math.min

-- idiv returns floor(a / b) for a >= 0, b > 0.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- cdiv returns ceil(a / b) for a >= 0, b > 0: idiv(a + b - 1, b), written
-- out (a Lua call costs more than the arithmetic).
local function cdiv(a, b)
  a = a + b - 1
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- int formats an integer exactly (tostring would use %.14g). Numbers given
-- to redis.call are formatted by the server with %.17g, which costs several
-- times more than this integer format: every number a script writes goes
-- through int.
local format = string.format
local function int(x)
  if x == 0 then
    return '0'
  end
  return format('%d', x)
end

-- snap records a scalar state, for undo tokens.
local function snap(x, y, z)
  return int(x) .. ':' .. int(y) .. ':' .. int(z)
end

-- window_start: the aligned window holding now, never before the newest
-- window the state has seen.
local function window_start(now, period, seen)
  local start = idiv(now, period) * period
  if start < seen then
    start = seen
  end
  return start
end

-- calendar_window returns the calendar period holding now among the bounds
-- b a calendar window's argument carries (see fixed_window.lua), or, if
-- the state has seen a later one (seen), that one.
local function calendar_window(b, now, seen)
  local i = 1
  if now >= b[3] then
    i = 3
  elseif now >= b[2] then
    i = 2
  end
  if b[i] < seen then
    i = 0
    for j = 1, 3 do
      if b[j] == seen then
        i = j
      end
    end
  end
  if i == 0 or now < b[1] or now >= b[4] then
    error('sluice: the Redis clock is more than a calendar period away from the instance\'s')
  end
  return b[i], b[i + 1]
end

-- cost_of returns the cost recorded in a log member "id:cost".
local function cost_of(member)
  return string.match(member, ':(%d+)$') + 0 -- digits, converted once (see read_state)
end

-- walk_log returns the score of the oldest record from which the running
-- total of costs reaches need (reading the log in chunks), or nil.
local function walk_log(log, need)
  local from = 0
  while true do
    local chunk = redis.call('ZRANGE', log, from, from + 127, 'WITHSCORES')
    if #chunk == 0 then
      return nil
    end
    for j = 1, #chunk, 2 do
      need = need - cost_of(chunk[j])
      if need <= 0 then
        return chunk[j + 1] + 0
      end
    end
    from = from + 128
  end
end

-- prune_log drops the records of log with a score at or below cutoff and
-- returns total y less their costs.
local function prune_log(log, cutoff, y)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
  if #old > 0 then
    for _, m in ipairs(old) do
      y = y - cost_of(m)
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
  end
  return y
end

local function newest_in_log(log)
  local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if #last > 0 then
    return last[2] + 0
  end
  return -1
end

-- Every algorithm is a function
--
--   f(p, x, y, z, now, c, commit, log, lease)
--     -> allowed, remaining, retry, reset, delay, x, y, z, idle[, e1, e2]
--
-- deciding a request of cost c at time now (µs) against parameters p and
-- the state (x, y, z) read from its hash (what each holds is written at the
-- algorithm); log and lease only for sliding_log and concurrency. It
-- returns the decision (retry, reset and delay in µs from now) and the
-- state after it: charged when admitted with c > 0 and commit, otherwise
-- only brought up to now (a window rolled over, a log pruned), and idle, 0
-- unless charged, the time at which the charged state is fresh again. The
-- scalar algorithms touch nothing in Redis, so a check spanning several
-- requests may charge them with commit and keep or drop the states
-- returned; the log algorithms write their log at once, and are charged only
-- when the whole check is admitted. e1 and e2 are what an undo token needs
-- beyond the states (see undo_token in decide.lua). Plain values rather than
-- tables: a table costs the server several times the arithmetic of a
-- decision.
