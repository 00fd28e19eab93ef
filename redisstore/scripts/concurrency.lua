-- concurrency.lua: the log (a sorted set, score = expiry, member =
-- "lease:cost") holds leases; y = their total cost, z = the latest time the
-- leases were read at.
local function concurrency(st, p, now, c, commit)
  now = max(now, st.z)
  if now ~= st.z then
    st.z, st.dirty = now, true
  end
  prune_log(st, now)
  local r = result(p.N)
  local used = st.y
  local last = newest_in_log(st.log)
  if used + c <= p.N then
    r.allowed = true
    used = used + c
    if c > 0 then
      last = max(now + p.TTL, last)
    end
    if commit and c > 0 then
      local before = st.undo ~= '' and before_charge(st)
      redis.call('ZADD', st.log, int(last), st.lease .. ':' .. int(c))
      st.y, st.idle, st.dirty = st.y + c, last, true
      r.lease = st.lease
      if before then
        r.undo = undo_token(before, st, '')
      end
    end
  else
    r.retry = walk_log(st.log, used + c - p.N) - now
  end
  r.remaining = p.N - used
  if used > 0 then
    r.reset = last - now
  end
  return r
end

-- release_lease removes lease id from the log, reporting whether it was held.
local function release_lease(st, id)
  local cursor = '0'
  repeat
    local page = redis.call('ZSCAN', st.log, cursor, 'MATCH', id .. ':*', 'COUNT', 256)
    cursor = page[1]
    for j = 1, #page[2], 2 do
      local member = page[2][j]
      if redis.call('ZREM', st.log, member) == 1 then
        st.y, st.dirty = st.y - cost_of(member), true
        return true
      end
    end
  until cursor == '0'
  return false
end
