-- fixed_window.lua: x = window start, y = count in it. See FixedWindow.
local function fixed_window(p, x, y, z, now, c, commit)
  local start = window_start(now, p.P, x)
  if start ~= x then
    x, y = start, 0
  end
  local count, stop, retry, reset, idle = y, start + p.P, 0, 0, 0
  local allowed = count + c <= p.N
  if allowed then
    count = count + c
    if commit and c > 0 then
      y, idle = count, stop
    end
  else
    retry = stop - now
  end
  if count > 0 then
    reset = stop - now
  end
  return allowed, p.N - count, retry, reset, 0, x, y, z, idle, start
end
