-- bucket.lua: the token bucket, GCRA and the leaky bucket share one
-- arithmetic on the debt, the credit used in units (A units accrue per µs,
-- one request costs B units, Full = capacity x B).

-- bucket decides at time at >= now (a clock that went back is held at the
-- state's time) and returns allowed, remaining, retry and reset (counted
-- from now) and the debt after it.
--
-- The divisions are idiv and cdiv written out: this is the costliest
-- function of the commonest decisions, and a Lua call costs more than the
-- arithmetic. For the same reason a floor is q - q % 1, which the VM
-- computes without calling math.floor (exact for any double).
local function bucket(p, debt, c, at, now)
  local A, B, Full = p.A, p.B, p.Full
  local need, retry, remaining = c * B, 0, 0
  local allowed = debt + need <= Full
  local a, q
  if allowed then
    debt = debt + need
  else
    a = debt + need - Full + A - 1 -- retry = cdiv(debt + need - Full, A)
    retry = a / A
    retry = retry - retry % 1
    if retry * A > a then
      retry = retry - 1
    elseif (retry + 1) * A <= a then
      retry = retry + 1
    end
  end
  if debt < Full then -- remaining = idiv(Full - debt, B)
    a = Full - debt
    remaining = a / B
    remaining = remaining - remaining % 1
    if remaining * B > a then
      remaining = remaining - 1
    elseif (remaining + 1) * B <= a then
      remaining = remaining + 1
    end
  end
  a = debt + A - 1 -- reset = cdiv(debt, A)
  q = a / A
  q = q - q % 1
  if q * A > a then
    q = q - 1
  elseif (q + 1) * A <= a then
    q = q + 1
  end
  return allowed, remaining, retry + at - now, q + at - now, debt
end

-- token_bucket: x = used units at time y.
local function token_bucket(p, x, y, z, now, c, commit)
  local at = y - p.back
  if at < now then
    at = now
  end
  local used = x
  local e = at - y
  if e >= 0 then
    if used > 0 and e >= cdiv(used, p.A) then
      used = 0
    elseif used > 0 then
      used = used - e * p.A
    end
  else
    used = used - e * p.A
  end
  local allowed, remaining, retry, reset
  allowed, remaining, retry, reset, used = bucket(p, used, c, at, now)
  local idle = 0
  if allowed and commit and c > 0 then
    -- fresh again once used has refilled: reset is that, counted from now
    x, y, idle = used, at, reset + now
  end
  return allowed, remaining, retry, reset, 0, x, y, z, idle
end

-- gcra (and the leaky bucket when p.leaky): the theoretical arrival time is
-- x - y/A µs, 0 <= y < A.
local function gcra(p, x, y, z, now, c, commit)
  local at = x - p.back
  if at < now then
    at = now
  end
  local debt = 0
  if x > at then
    debt = (x - at) * p.A - y
  end
  local before = debt
  local allowed, remaining, retry, reset
  allowed, remaining, retry, reset, debt = bucket(p, debt, c, at, now)
  local delay, idle = 0, 0
  if p.leaky then
    -- algo's shape: start once the queue ahead has drained to the nodelay
    -- allowance; a request that would wait longer than the caller's bound
    -- (p.MaxDelay, -1 for none) is refused uncharged, until the queue ahead
    -- has drained to the bound or the bucket admits it, whichever is later
    local wait, md = cdiv(max(0, before - p.NoDelay * p.B), p.A), p.MaxDelay
    if md < 0 or wait <= md then
      if allowed then
        delay = wait
      end
    else
      if allowed then
        debt, allowed = before, false
        remaining = idiv(max(0, p.Full - before), p.B)
        reset = cdiv(before, p.A) + at - now
      end
      retry = max(retry, wait - md + at - now)
    end
  end
  if allowed and commit and c > 0 then
    local ahead = reset - at + now -- cdiv(debt, p.A)
    x, y = at + ahead, ahead * p.A - debt
    idle = x
  end
  return allowed, remaining, retry, reset, delay, x, y, z, idle
end
