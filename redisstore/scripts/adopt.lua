-- adopt.lua: carry a state written under other parameters (its field p)
-- over to a request's, as sluice's Go function algo.Adopt does, line by
-- line; see sluice.Limit for the rule per algorithm. o and p are parsed
-- limit arguments of the same algorithm.

-- adopt_window keeps the count y of the window starting at x if it has not
-- ended by now, moved to p's window holding now (or x, if the clock went
-- back); otherwise the state starts afresh. A sliding window's previous
-- count z is dropped.
local function adopt_window(o, p, x, y, z, now, sliding)
  if y == 0 then
    return 0, 0, 0
  end
  local stop = x + o.P
  if o.bounds then
    stop = now -- a start the bounds do not hold: ended
    for j = 1, 3 do
      if o.bounds[j] == x then
        stop = o.bounds[j + 1]
      end
    end
  end
  if now >= stop then
    return 0, 0, 0
  end
  local at = max(now, x)
  if p.bounds then
    x = calendar_window(p.bounds, at, 0)
  else
    x = window_start(at, p.P, 0)
  end
  if sliding then
    z = 0
  end
  return x, y, z
end

-- requests converts debt, credit units of o, into as many whole requests
-- (rounded up) in units of p, at most p's full bucket.
local function requests(o, p, debt)
  local n = cdiv(debt, o.B)
  if n >= p.Cap then
    return p.Full
  end
  return n * p.B
end

-- adopt returns the state (x, y, z), written under o, carried over to p at
-- now.
local function adopt(o, p, x, y, z, now)
  local alg = p.alg
  if alg == FIXED_WINDOW or alg == SLIDING_WINDOW and o.P ~= p.P then
    return adopt_window(o, p, x, y, z, now, alg == SLIDING_WINDOW)
  elseif alg == TOKEN_BUCKET then
    return requests(o, p, x), y, z
  elseif alg == GCRA or alg == LEAKY_BUCKET then
    local at = max(now, x - o.back)
    local debt = 0
    if x > at then
      debt = (x - at) * o.A - y
    end
    debt = requests(o, p, debt)
    if debt == 0 then
      return 0, 0, z
    end
    local ahead = cdiv(debt, p.A)
    return at + ahead, ahead * p.A - debt, z
  elseif alg == WARM_UP and y > p.Warm then
    y = p.Warm
  end
  return x, y, z
end

-- adopted_idle returns the time from which the state (x, y, z), carried
-- over to p, is fresh again (algo.AdoptedIdle): the key's TTL is extended
-- to it, although nothing has charged it under p yet.
local function adopted_idle(p, x, y, z)
  local alg = p.alg
  if alg == FIXED_WINDOW then
    if y == 0 then
      return 0
    end
    if p.bounds then
      return select(2, calendar_window(p.bounds, x, x))
    end
    return x + p.P
  elseif alg == SLIDING_WINDOW then
    if y == 0 and z == 0 then
      return 0
    end
    return x + 2 * p.P
  elseif alg == TOKEN_BUCKET then
    return y + cdiv(x, p.A)
  elseif alg == GCRA or alg == LEAKY_BUCKET then
    return x
  elseif alg == WARM_UP then
    return x + y
  end
  return 0
end
