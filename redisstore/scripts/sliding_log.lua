-- sliding_log.lua: the log (a sorted set, score = admission time, member =
-- "seq:cost") holds admitted requests; x = the member sequence (hash field
-- q), y = their total cost, z = the latest time the log was read at.
local function sliding_log(p, x, y, z, now, c, commit, log)
  local t = max(now, z)
  z = t
  y = prune_log(log, t - p.P, y)
  local used, retry, reset, idle = y, 0, 0, 0
  local newest = newest_in_log(log)
  local allowed = used + c <= p.N
  if allowed then
    used = used + c
    if c > 0 then
      newest = t
    end
    if commit and c > 0 then
      x = x + 1
      redis.call('ZADD', log, int(t), int(x) .. ':' .. int(c))
      y, idle = used, t + p.P
    end
  else
    retry = walk_log(log, used + c - p.N) + p.P - now
  end
  if newest >= 0 and used > 0 then
    reset = newest + p.P - now
  end
  local left = p.N - used
  if left < 0 then -- a count carried over from a higher limit
    left = 0
  end
  return allowed, left, retry, reset, 0, x, y, z, idle
end
