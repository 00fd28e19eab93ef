-- stateio.lua: a request's state in Redis: read it (carried over to its
-- limit when it was kept under another, adopt.lua) and write it back with
-- its TTL.
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much
local REUSE_MS = 10000 -- and a key charged again extends its TTL by this much more

-- read_state reads a request's state hash: x, y, z (see each algorithm),
-- e (the time until which the key's TTL holds it, see write_state) and
-- whether the key exists. Only the fields the algorithm uses are read:
-- every field and every conversion costs time on every call. A field is
-- converted by arithmetic ((v or 0) + 0, a missing field being false),
-- which parses its digits once, where tonumber parses them twice (Lua 5.1
-- checks, then converts); a field that is not a number, which sluice never
-- writes, makes the call fail rather than read as a fresh state.
local function read_state(alg, key)
  local v
  if alg == CONCURRENCY then
    v = redis.call('HMGET', key, 'y', 'z')
    return 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false
  elseif alg == SLIDING_LOG then
    v = redis.call('HMGET', key, 'y', 'z', 'q')
    return (v[3] or 0) + 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false
  elseif alg == SLIDING_WINDOW then
    v = redis.call('HMGET', key, 'x', 'y', 'z', 'e', 'q', 'p')
    return (v[1] or 0) + 0, (v[2] or 0) + 0, (v[3] or 0) + 0, v[5] == false and (v[4] or 0) + 0 or 0, v[1] ~= false, v[6]
  end
  v = redis.call('HMGET', key, 'x', 'y', 'e', 'q', 'p')
  local y = v[2]
  if y == '0' then -- often: GCRA's remainder under a whole rate
    y = 0
  else
    y = (y or 0) + 0
  end
  return (v[1] or 0) + 0, y, 0, v[4] == false and (v[3] or 0) + 0 or 0, v[1] ~= false, v[5]
end

-- same_periods tells whether o and p are one calendar window's arguments
-- (same N) sent from different periods: their bounds share a period (a
-- consecutive pair). An argument carries no unit or zone, so shared bounds
-- are what identify the calendar; two zones with the same midnights are
-- the same periods.
local function same_periods(o, p)
  if not (o.bounds and p.bounds) or o.N ~= p.N then
    return false
  end
  local a, b = o.bounds, p.bounds
  for i = 1, 3 do
    for j = 1, 3 do
      if a[i] == b[j] and a[i + 1] == b[j + 1] then
        return true
      end
    end
  end
  return false
end

-- state reads the state of a request under parameters p (read_state) and
-- carries it over to p if it was written under others (adopt.lua): the
-- state, e, whether the key existed, and what write_state must store in
-- field p, the parameters the state is kept under (p.canon for a key that
-- is new or carried over, false otherwise). sliding_log and concurrency
-- keep no field p: their state reads the same under any parameters.
local function state(p, key, now)
  local alg = p.alg
  local x, y, z, e, existed, ps = read_state(alg, key)
  if alg == SLIDING_LOG or alg == CONCURRENCY then
    return x, y, z, e, existed, false
  end
  if not existed then
    return x, y, z, e, existed, p.canon
  end
  if ps and ps ~= p.canon then
    local o = params(ps)
    if same_periods(o, p) then
      -- the same calendar limit, sent by an instance in another period:
      -- no change to carry over; the stored bounds follow the later one
      if p.bounds[1] > o.bounds[1] then
        return x, y, z, e, existed, p.canon
      end
      return x, y, z, e, existed, false
    end
    x, y, z = adopt(o, p, x, y, z, now)
    return x, y, z, e, existed, p.canon
  end
  return x, y, z, e, existed, false
end

-- write_state writes a changed state back: the fields its algorithm uses.
-- A state charged by this script (idle > 0) lives at least until it is
-- fresh again (plus SLACK_MS); a state only brought up to date (a window
-- rolled over, a log pruned) keeps its TTL, and a key that did not exist
-- is not created for it.
--
-- The scalar algorithms (all but sliding_log and concurrency) also keep in
-- field e the time, on the script's clock, until which the key's TTL holds
-- it (read as e). A charge that needs the key no longer than that leaves
-- the TTL alone: no PEXPIRE, the costliest command of a decision. When the
-- TTL must grow, it is set to the need plus a headroom: SLACK_MS plus an
-- eighth of the time to freshness, plus REUSE_MS for a key that existed (a
-- key in use, which would otherwise pay PEXPIRE on every request that
-- comes more than a second after the last): a key used again extends its
-- TTL about once every REUSE_MS, and lingers at most that much longer
-- after its last request; a key used once keeps the short TTL. A key also holding field q was
-- written by an older sluice, which sets TTLs without updating e: its e is
-- not trusted (read_state returns 0).
local function write_state(alg, key, log, existed, x, y, z, idle, e, now, ox, oy, pw)
  if not existed and idle == 0 then
    return
  end
  if pw and existed then -- carried over: kept until fresh under its new limit
    local a = adopted_idle(params(pw), x, y, z)
    if a > idle then
      idle = a
    end
  end
  if alg == SLIDING_LOG or alg == CONCURRENCY then
    if alg == SLIDING_LOG then
      redis.call('HSET', key, 'y', int(y), 'z', int(z), 'q', int(x))
    else
      redis.call('HSET', key, 'y', int(y), 'z', int(z))
    end
    if idle > 0 then
      local ttl = int(cdiv(max(idle - now, 0), 1000) + SLACK_MS)
      redis.call('PEXPIRE', key, ttl)
      redis.call('PEXPIRE', log, ttl)
    end
    return
  end
  -- Only the fields that changed (every field costs the server time): a
  -- GCRA charge mostly moves x alone, a fixed window's y alone. ox and oy
  -- are x and y as read. (x is rarely 0, y often is; the TTL arithmetic
  -- need not be exact, only never short, so it does without idiv's
  -- correction.)
  local sx, sy = false, false
  if x ~= ox or not existed then
    sx = format('%d', x)
  end
  if y ~= oy or not existed then
    sy = int(y)
  end
  local until_ = 0
  if idle > 0 then
    local need = idle
    if need < now then
      need = now
    end
    need = need + SLACK_MS * 1000
    if e < need then
      until_ = need + SLACK_MS * 1000
      if existed then
        until_ = until_ + REUSE_MS * 1000
      end
      if idle > now then
        until_ = until_ + floor((idle - now) / 8)
      end
    end
  end
  if pw then -- parameters new or changed: every field, and p, in one command
    sx, sy = format('%d', x), int(y)
    local se = format('%d', max(until_, e))
    if alg == SLIDING_WINDOW then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'p', pw, 'e', se)
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'p', pw, 'e', se)
    end
  elseif alg == SLIDING_WINDOW then -- the sliding window writes all three
    sx, sy = format('%d', x), int(y)
    if until_ > 0 then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'e', format('%d', until_))
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z))
    end
  elseif until_ > 0 then
    local se = format('%d', until_)
    if sx and sy then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'e', se)
    elseif sx then
      redis.call('HSET', key, 'x', sx, 'e', se)
    elseif sy then
      redis.call('HSET', key, 'y', sy, 'e', se)
    else
      redis.call('HSET', key, 'e', se)
    end
  elseif sx and sy then
    redis.call('HSET', key, 'x', sx, 'y', sy)
  elseif sx then
    redis.call('HSET', key, 'x', sx)
  elseif sy then
    redis.call('HSET', key, 'y', sy)
  end
  if until_ > 0 then
    redis.call('PEXPIRE', key, format('%d', floor((until_ - now) / 1000) + 1))
  end
end
