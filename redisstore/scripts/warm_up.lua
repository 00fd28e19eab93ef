-- warm_up.lua: Guava's SmoothWarmingUp, cold factor 3. x = when the next
-- request may start, y = warmth in µs (0 = cold, Warm = fully warm).
local function warm_up(st, p, now, c, commit)
  local nxt, warmth = st.x, st.y
  if now > nxt then
    warmth = max(0, warmth - (now - nxt))
    nxt = now
  end
  local r = result(1)
  if nxt > now then
    r.retry = nxt - now
    r.reset = nxt - now
    return r
  end
  r.allowed = true
  if c == 0 then
    r.remaining = 1
    return r
  end
  local stored = p.Warm - warmth
  local stable = cdiv(c * p.P, p.N)
  local take = min(stored, stable)
  local u2 = max(0, 2 * stored - p.Warm)
  local u1 = max(0, 2 * (stored - take) - p.Warm)
  local extra = 0
  if u2 > u1 then
    extra = cdiv((u2 - u1) * (u2 + u1), 2 * p.Warm)
  end
  nxt = now + stable + extra
  r.reset = nxt - now
  if commit then
    local before = st.undo ~= '' and before_charge(st)
    st.x, st.y, st.dirty = nxt, warmth + take, true
    st.idle = nxt + st.y
    if before then
      r.undo = undo_token(before, st, int(stable + extra) .. ':' .. int(take))
    end
  end
  return r
end
