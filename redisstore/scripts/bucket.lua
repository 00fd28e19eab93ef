-- bucket.lua: the token bucket, GCRA and the leaky bucket share one
-- arithmetic on the debt, the credit used in units (A units accrue per µs,
-- one request costs B units, Full = capacity x B).

-- bucket decides at time at >= now (a clock that went back is held at the
-- state's time); retry and reset count from now.
local function bucket(p, debt, c, at, now)
  local r = result(p.Cap)
  local need = c * p.B
  if debt + need <= p.Full then
    r.allowed = true
    debt = debt + need
  else
    r.retry = cdiv(debt + need - p.Full, p.A)
  end
  r.retry = r.retry + at - now
  if debt < p.Full then -- (max and the like inlined: a call costs more)
    r.remaining = idiv(p.Full - debt, p.B)
  end
  r.reset = cdiv(debt, p.A) + at - now
  return r, debt
end

-- token_bucket: x = used units at time y.
local function token_bucket(st, p, now, c, commit)
  local at = st.y - p.back
  if at < now then
    at = now
  end
  local used = st.x
  local e = at - st.y
  if e >= 0 then
    if used > 0 and e >= cdiv(used, p.A) then
      used = 0
    elseif used > 0 then
      used = used - e * p.A
    end
  else
    used = used - e * p.A
  end
  local r
  r, used = bucket(p, used, c, at, now)
  if r.allowed and commit and c > 0 then
    local before = st.undo ~= '' and before_charge(st)
    st.x, st.y, st.idle, st.dirty = used, at, at + cdiv(used, p.A), true
    if before then
      r.undo = undo_token(before, st, '')
    end
  end
  return r
end

-- gcra (and the leaky bucket when p.leaky): the theoretical arrival time is
-- x - y/A µs, 0 <= y < A.
local function gcra(st, p, now, c, commit)
  local at = st.x - p.back
  if at < now then
    at = now
  end
  local debt = 0
  if st.x > at then
    debt = (st.x - at) * p.A - st.y
  end
  local before = debt
  local r
  r, debt = bucket(p, debt, c, at, now)
  if p.leaky and r.allowed then
    r.delay = cdiv(max(0, before - p.NoDelay * p.B), p.A)
  end
  if r.allowed and commit and c > 0 then
    local before = st.undo ~= '' and before_charge(st)
    local ahead = cdiv(debt, p.A)
    st.x, st.y, st.dirty = at + ahead, ahead * p.A - debt, true
    st.idle = st.x
    if before then
      r.undo = undo_token(before, st, '')
    end
  end
  return r
end
