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

local function sliding_window(p, x, y, z, now, c, commit)
  local start = window_start(now, p.P, x)
  if start ~= x then
    local prev = 0
    if start - x == p.P then
      prev = y
    end
    x, y, z = start, 0, prev
  end
  local cur, prev = y, z
  local elapsed = max(now - start, 0)
  local weighted = cdiv(prev * (65536 - cdiv(elapsed * 65536, p.P)), 65536)
  local retry, reset, idle = 0, 0, 0
  local allowed = weighted + cur + c <= p.N
  if allowed then
    cur = cur + c
    if commit and c > 0 then
      y, idle = cur, start + 2 * p.P
    end
  else
    local e = sw_earliest(p, p.N - cur - c, prev)
    if e < p.P then
      retry = start + e - now
    else
      e = sw_earliest(p, p.N - c, cur)
      if e < p.P then
        retry = start + p.P + e - now
      else
        retry = start + 2 * p.P - now
      end
    end
  end
  if cur > 0 then
    reset = start + 2 * p.P - now
  elseif weighted > 0 then
    reset = start + p.P - now
  end
  return allowed, max(0, p.N - weighted - cur), retry, reset, 0, x, y, z, idle, start
end
