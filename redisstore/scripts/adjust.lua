-- adjust.lua: change the usage of one key by a signed delta, as sluice's Go
-- package internal/algo does in Adjust (read it for the rules and the
-- reasoning): a charge into a debt of at most CAPACITIES capacities past an
-- exhausted limit, a refund down to an unused limit. KEYS and ARGV as in
-- args.lua, with the count 1 and one request whose cost is not sent, then
-- one more argument: the delta, a signed decimal integer. Returns the 6
-- values take.lua returns for one request: the state after the adjustment
-- as a peek reports it.
local EXACT = 2 ^ 53 -- a bucket's debt stays below it
local CAPACITIES = 4 -- sluice.AdjustCapacities: the deepest debt past an exhausted limit
local CEILING = CAPACITIES + 1 -- the capacities a state may hold: an exhausted limit and its debt

-- adjust_count returns count + delta within [0, ceiling], never lowered by
-- a charge.
local function adjust_count(count, delta, ceiling)
  if delta > 0 then
    return max(count, min(count + delta, ceiling))
  end
  return max(0, count + delta)
end

-- adjust_two: adjust_count on the current window's count, a refund taking
-- from the previous window's what the current one cannot give.
local function adjust_two(cur, prev, delta, ceiling)
  if delta > 0 or cur + delta >= 0 then
    return adjust_count(cur, delta, ceiling), prev
  end
  return 0, max(0, prev + cur + delta)
end

-- adjust_log records a charge at the log's time z, or takes a refund from
-- the newest records; it returns the member sequence and the total.
local function adjust_log(p, x, y, z, delta, log)
  if delta > 0 then
    local c = adjust_count(y, delta, CEILING * p.N) - y
    if c > 0 then
      x = x + 1
      redis.call('ZADD', log, int(z), int(x) .. ':' .. int(c))
      y = y + c
    end
    return x, y
  end
  local rest = -delta
  while rest > 0 do
    local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
    if #last == 0 then
      break
    end
    local c = cost_of(last[1])
    local took = min(rest, c)
    redis.call('ZREM', log, last[1])
    if took < c then
      x = x + 1
      redis.call('ZADD', log, last[2], int(x) .. ':' .. int(c - took))
    end
    y, rest = y - took, rest - took
  end
  return x, y
end

-- adjust_debt returns a bucket's debt after delta, the debt measured
-- hidden µs after now (see algo's adjustDebt).
local function adjust_debt(p, debt, hidden, delta)
  if delta < 0 then
    return max(0, debt + delta * p.B)
  end
  local ceiling = min(CEILING * p.Full, EXACT)
  if hidden > 0 then
    if hidden > idiv(EXACT, p.A) then
      return debt
    end
    ceiling = ceiling - hidden * p.A
  end
  return max(debt, min(debt + delta * p.B, ceiling))
end

-- adjust_token_bucket: x = used units at time y (see token_bucket).
local function adjust_token_bucket(p, x, y, now, delta)
  local at = max(now, y - p.back)
  local used, e = x, at - y
  if e < 0 then
    used = used - e * p.A
  elseif used > 0 then
    if e >= cdiv(used, p.A) then
      used = 0
    else
      used = used - e * p.A
    end
  end
  return adjust_debt(p, used, at - now, delta), at
end

-- adjust_gcra moves the theoretical arrival time x - y/A, its debt measured
-- at now unless the clock went back further than the deepest debt.
local function adjust_gcra(p, x, y, now, delta)
  local at = max(now, x - (cdiv(min(CEILING * p.Full, EXACT), p.A) + 1))
  local debt = 0
  if x > at then
    debt = (x - at) * p.A - y
  end
  debt = adjust_debt(p, debt, at - now, delta)
  local ahead = cdiv(debt, p.A)
  return at + ahead, ahead * p.A - debt
end

-- adjust_warm_up moves the next admission x by the delta at the stable
-- rate, cooling the warmth y as warm_up would have by now.
local function adjust_warm_up(p, x, y, now, delta)
  local nxt, warmth = x, y
  if now > nxt then
    warmth = max(0, warmth - (now - nxt))
    nxt = now
  end
  if delta > 0 then
    nxt = max(nxt, min(nxt + cdiv(delta * p.P, p.N), now + CAPACITIES * p.P))
  else
    nxt = max(now, nxt - idiv(-delta * p.P, p.N))
  end
  return nxt, warmth
end

local now = clock()
local r = load(1, 3, now) -- carried over to the request's limit (stateio.lua)
local delta = tonumber(argv[4])
if not delta or delta ~= floor(delta) then
  error('sluice: malformed adjustment "' .. tostring(argv[4]) .. '"')
end
local p, f, log = r.p, r.f, r.log
local alg = p.alg
local x, y, z = r.x, r.y, r.z
if delta ~= 0 then
  local _
  _, _, _, _, _, x, y, z = f(p, x, y, z, now, 0, false, log) -- windows rolled over, logs pruned
  if alg == FIXED_WINDOW then
    y = adjust_count(y, delta, CEILING * p.N)
  elseif alg == SLIDING_WINDOW then
    y, z = adjust_two(y, z, delta, min(CEILING * p.N, 2 ^ 37)) -- the weighted count stays exact
  elseif alg == SLIDING_LOG then
    x, y = adjust_log(p, x, y, z, delta, log)
  elseif alg == TOKEN_BUCKET then
    x, y = adjust_token_bucket(p, x, y, now, delta)
  elseif alg == GCRA or alg == LEAKY_BUCKET then
    x, y = adjust_gcra(p, x, y, now, delta)
  elseif alg == WARM_UP then
    x, y = adjust_warm_up(p, x, y, now, delta)
  else
    error('sluice: cannot adjust a limit of algorithm ' .. alg)
  end
end
local allowed, remaining, retry, reset, delay, x2, y2, z2 = peek(f, p, x, y, z, now, log)
local idle = 0
if delta > 0 then -- charged: the key lives until its state is fresh again
  idle = now + reset
  if alg == WARM_UP then
    idle = x2 + y2
  end
end
if idle > 0 or x2 ~= r.x or y2 ~= r.y or z2 ~= r.z or r.pw and r.existed then
  write_state(alg, r.key, log, r.existed, x2, y2, z2, idle, r.e, now, r.x, r.y, r.pw)
end
local a = 0
if allowed then
  a = 1
end
return { a, p.limit, remaining, retry, reset, delay }
