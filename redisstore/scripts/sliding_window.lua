-- sliding_window.lua: x = current window start, y = its count, z = count of
-- the window before. The previous window is weighted in steps of 1/65536.
local function sw_earliest(p, k, prev)
  if k < 0 then
    return p.P
  end
  if prev <= k then
    return 0
  end
  local f = 65536 - idiv(k * 65536, prev)
  return idiv((f - 1) * p.P, 65536) + 1
end

local function sliding_window(st, p, now, c, commit)
  local start = window_start(now, p.P, st.x)
  if start ~= st.x then
    local prev = 0
    if start - st.x == p.P then
      prev = st.y
    end
    st.x, st.y, st.z, st.dirty = start, 0, prev, true
  end
  local cur, prev = st.y, st.z
  local elapsed = max(now - start, 0)
  local weighted = cdiv(prev * (65536 - cdiv(elapsed * 65536, p.P)), 65536)
  local r = result(p.N)
  if weighted + cur + c <= p.N then
    r.allowed = true
    cur = cur + c
    if commit and c > 0 then
      local before = st.undo ~= '' and before_charge(st)
      st.y, st.idle, st.dirty = cur, start + 2 * p.P, true
      if before then
        r.undo = undo_token(before, st, int(start))
      end
    end
  else
    local e = sw_earliest(p, p.N - cur - c, prev)
    if e < p.P then
      r.retry = start + e - now
    else
      e = sw_earliest(p, p.N - c, cur)
      if e < p.P then
        r.retry = start + p.P + e - now
      else
        r.retry = start + 2 * p.P - now
      end
    end
  end
  r.remaining = max(0, p.N - weighted - cur)
  if cur > 0 then
    r.reset = start + 2 * p.P - now
  elseif weighted > 0 then
    r.reset = start + p.P - now
  end
  return r
end
