-- concurrency.lua: the log (a sorted set, score = expiry, member =
-- "lease:cost") holds leases; y = their total cost, z = the latest time the
-- leases were read at.
local function concurrency(p, x, y, z, now, c, commit, log, lease)
  now = max(now, z)
  z = now
  y = prune_log(log, now, y)
  local used, retry, reset, idle = y, 0, 0, 0
  local last = newest_in_log(log)
  local allowed = used + c <= p.N
  if allowed then
    used = used + c
    if c > 0 then
      last = max(now + p.TTL, last)
    end
    if commit and c > 0 then
      redis.call('ZADD', log, int(last), lease .. ':' .. int(c))
      y, idle = used, last
    end
  else
    retry = walk_log(log, used + c - p.N) - now
  end
  if used > 0 then
    reset = last - now
  end
  local left = p.N - used
  if left < 0 then -- a count carried over from a higher limit
    left = 0
  end
  return allowed, left, retry, reset, 0, x, y, z, idle
end

-- release_lease removes lease id from log, returning whether it was held
-- and total y less its cost.
local function release_lease(log, id, y)
  local cursor = '0'
  repeat
    local page = redis.call('ZSCAN', log, cursor, 'MATCH', id .. ':*', 'COUNT', 256)
    cursor = page[1]
    for j = 1, #page[2], 2 do
      local member = page[2][j]
      if redis.call('ZREM', log, member) == 1 then
        return true, y - cost_of(member)
      end
    end
  until cursor == '0'
  return false, y
end
