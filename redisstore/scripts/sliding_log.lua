-- sliding_log.lua: the log (a sorted set, score = admission time, member =
-- "seq:cost") holds admitted requests; y = their total cost, z = the latest
-- time the log was read at, q = the member sequence.
local function sliding_log(st, p, now, c, commit)
  local t = max(now, st.z)
  if t ~= st.z then
    st.z, st.dirty = t, true
  end
  prune_log(st, t - p.P)
  local r = result(p.N)
  local used = st.y
  local newest = newest_in_log(st.log)
  if used + c <= p.N then
    r.allowed = true
    used = used + c
    if c > 0 then
      newest = t
    end
    if commit and c > 0 then
      local before = st.undo ~= '' and before_charge(st)
      st.q = st.q + 1
      local member = int(st.q) .. ':' .. int(c)
      redis.call('ZADD', st.log, int(t), member)
      st.y, st.idle, st.dirty = st.y + c, t + p.P, true
      if before then
        r.undo = undo_token(before, st, member)
      end
    end
  else
    r.retry = walk_log(st.log, used + c - p.N) + p.P - now
  end
  r.remaining = p.N - used
  if newest >= 0 and used > 0 then
    r.reset = newest + p.P - now
  end
  return r
end
