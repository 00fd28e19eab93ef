-- warm_up.lua: Guava's SmoothWarmingUp, cold factor 3. x = when the next
-- request may start, y = warmth in µs (0 = cold, Warm = fully warm).
local function warm_up(p, x, y, z, now, c, commit)
  local nxt, warmth = x, y
  if now > nxt then
    warmth = max(0, warmth - (now - nxt))
    nxt = now
  end
  if nxt > now then
    return false, 0, nxt - now, nxt - now, 0, x, y, z, 0
  end
  if c == 0 then
    return true, 1, 0, 0, 0, x, y, z, 0
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
  local idle = 0
  if commit then
    x, y = nxt, warmth + take
    idle = x + y
  end
  return true, 0, 0, nxt - now, 0, x, y, z, idle, stable + extra, take
end
