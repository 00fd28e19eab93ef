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

-- snap records the scalar state, for undo tokens.
local function snap(st)
  return int(st.x) .. ':' .. int(st.y) .. ':' .. int(st.z)
end

-- before_charge records the state about to be charged: its scalars, or
-- "new" if the key did not exist.
local function before_charge(st)
  if st.existed then
    return snap(st)
  end
  return 'new'
end

-- An undo token tells refund.lua how to give back a charge:
-- "<state before>|<state after>|<extra>". If nothing else has changed the
-- state since, the state before is restored exactly (a new key is deleted);
-- otherwise the charge is subtracted using <extra> (see refund.lua).
local function undo_token(before, st, extra)
  return before .. '|' .. snap(st) .. '|' .. extra
end

-- spare_result is a result table that a batch script is done with (see
-- check): result refills it rather than building a table, which costs a
-- decision several times more.
local spare_result = nil

local function result(limit)
  local r = spare_result
  if r then
    spare_result = nil
    r.allowed, r.limit, r.remaining, r.retry, r.reset, r.delay, r.lease, r.undo = false, limit, 0, 0, 0, 0, '', ''
    return r
  end
  return { allowed = false, limit = limit, remaining = 0, retry = 0, reset = 0, delay = 0, lease = '', undo = '' }
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

-- cost_of returns the cost recorded in a log member "id:cost".
local function cost_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
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
        return tonumber(chunk[j + 1])
      end
    end
    from = from + 128
  end
end

-- prune_log drops records with a score at or below cutoff, subtracting their
-- costs from st.y.
local function prune_log(st, cutoff)
  local old = redis.call('ZRANGEBYSCORE', st.log, '-inf', cutoff)
  if #old > 0 then
    for _, m in ipairs(old) do
      st.y = st.y - cost_of(m)
    end
    redis.call('ZREMRANGEBYSCORE', st.log, '-inf', cutoff)
    st.dirty = true
  end
end

local function newest_in_log(log)
  local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if #last > 0 then
    return tonumber(last[2])
  end
  return -1
end
