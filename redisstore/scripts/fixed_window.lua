-- fixed_window.lua: x = window start, y = count in it. See FixedWindow.
local function fixed_window(st, p, now, c, commit)
  local start = window_start(now, p.P, st.x)
  if start ~= st.x then
    st.x, st.y, st.dirty = start, 0, true
  end
  local count = st.y
  local stop = start + p.P
  local r = result(p.N)
  if count + c <= p.N then
    r.allowed = true
    count = count + c
    if commit and c > 0 then
      local before = st.undo ~= '' and before_charge(st)
      st.y, st.idle, st.dirty = count, stop, true
      if before then
        r.undo = undo_token(before, st, int(start))
      end
    end
  else
    r.retry = stop - now
  end
  r.remaining = p.N - count
  if count > 0 then
    r.reset = stop - now
  end
  return r
end
