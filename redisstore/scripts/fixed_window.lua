-- fixed_window.lua: x = window start, y = count in it. See FixedWindow.
--
-- A calendar window (p.bounds set) has no arithmetic of its own: the
-- instance sends the bounds of the periods around its own now, computed in
-- its time zone (see algo.Params.Periods), and the window is the one of
-- them holding now, or the newest the state has seen if the clock has gone
-- back. A clock more than a period away from the instance's is an error:
-- the bounds cannot say where its period ends.
local function fixed_window(p, x, y, z, now, c, commit)
  local start, stop
  if p.bounds then
    start, stop = calendar_window(p.bounds, now, x)
  else
    start = window_start(now, p.P, x)
    stop = start + p.P
  end
  if start ~= x then
    x, y = start, 0
  end
  local count, retry, reset, idle = y, 0, 0, 0
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
  local left = p.N - count
  if left < 0 then -- a count carried over from a higher limit
    left = 0
  end
  return allowed, left, retry, reset, 0, x, y, z, idle, start
end
