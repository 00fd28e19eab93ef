-- stateio.lua: a request's state in Redis: read it (carried over to its
-- limit when it was kept under another, adopt.lua) and write it back with
-- its TTL.
local SLACK_MS = 1000 -- keys outlive the time their state turns fresh by this much
local REUSE_MS = 10000 -- and a key charged again extends its TTL by this much more

-- read_state reads a request's state hash: x, y, z (see each algorithm),
-- e (the time until which the key's TTL holds it, see write_state),
-- whether the key exists and p (the parameters its state is kept under,
-- false if none). Only the fields the algorithm uses are read: every field
-- costs the server about 2k instructions on every call. A field is
-- converted by arithmetic ((v or 0) + 0, a missing field being false),
-- which parses its digits once, where tonumber parses them twice (Lua 5.1
-- checks, then converts); a field that is not a number, which sluice never
-- writes, makes the call fail rather than read as a fresh state.
local function read_state(alg, key)
  local v
  if alg == CONCURRENCY then
    v = redis.call('HMGET', key, 'y', 'z')
    return 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false, false
  elseif alg == SLIDING_LOG then
    v = redis.call('HMGET', key, 'y', 'z', 'q')
    return (v[3] or 0) + 0, (v[1] or 0) + 0, (v[2] or 0) + 0, 0, v[1] ~= false, false
  elseif alg == SLIDING_WINDOW then
    v = redis.call('HMGET', key, 'x', 'y', 'z', 'e', 'p')
    return (v[1] or 0) + 0, (v[2] or 0) + 0, (v[3] or 0) + 0, (v[4] or 0) + 0, v[1] ~= false, v[5]
  end
  v = redis.call('HMGET', key, 'x', 'y', 'e', 'p')
  local y = v[2]
  if y == '0' then -- often: GCRA's remainder under a whole rate
    y = 0
  else
    y = (y or 0) + 0
  end
  return (v[1] or 0) + 0, y, 0, (v[3] or 0) + 0, v[1] ~= false, v[4]
end

-- A batch's run of single checks of one scalar key (batch.lua: many
-- callers of one hot key) reads the key once and writes it once: between
-- its checks the state lives here, as the hash would hold it (x, y, z, e,
-- whether it exists, p), with which fields a write has changed (dx ... dp)
-- and the TTL (ms) the last write that extends it asks (false if none).
-- held is the key, nil outside a run. Each check of the run decides on
-- this state exactly as on the hash; the run's last check writes the
-- fields changed and the TTL, as the checks' writes one after another
-- would have left them. The entry points reset it (scripts.go), so that a
-- call that failed halfway leaves nothing held.
local held, hx, hy, hz, he, hexisted, hp = nil, 0, 0, 0, 0, false, false
local dx, dy, dz, de, dp, httl = false, false, false, false, false, false

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

-- state_of returns a request's state under parameters p, given its state
-- hash as read_state read it (ps: the parameters it is kept under), carried
-- over to p if it was written under others (adopt.lua): the state, e,
-- whether the key existed, and what write_state must store in field p
-- (p.canon for a key that is new or carried over, false otherwise).
-- sliding_log and concurrency keep no field p: their state reads the same
-- under any parameters.
local function state_of(p, now, x, y, z, e, existed, ps)
  local alg = p.alg
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

-- held_state is state_of for a single check of a batch on a scalar key: the
-- state held for key if a run of it is under way (see held), otherwise
-- the hash, read and held.
local function held_state(p, key, now)
  if held ~= key then
    held, hx, hy, hz, he, hexisted, hp = key, read_state(p.alg, key)
    dx, dy, dz, de, dp, httl = false, false, false, false, false, false
  end
  return state_of(p, now, hx, hy, hz, he, hexisted, hp)
end

-- put writes the fields of a scalar state given (numbers, false for a
-- field not written; p the parameters' string) in one HSET, written out
-- for each set of fields a write has.
local function put(key, x, y, z, e, p)
  local sx, sy, se = x and format('%d', x), y and int(y), e and format('%d', e)
  if p then -- parameters new or changed: every field, and p
    if z then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'p', p, 'e', se)
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'p', p, 'e', se)
    end
  elseif z then -- the sliding window writes all three
    if se then
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z), 'e', se)
    else
      redis.call('HSET', key, 'x', sx, 'y', sy, 'z', int(z))
    end
  elseif se then
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
end

-- flush ends a run of the held key (see held): it writes the fields the
-- run's checks changed, and the TTL the last of them set.
local function flush()
  if held and (dx or dy or dz or de or dp) then
    put(held, dx and hx, dy and hy, dz and hz, de and he, dp and hp)
    if httl then
      redis.call('PEXPIRE', held, format('%d', httl))
    end
  end
  held = nil
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
-- after its last request; a key used once keeps the short TTL.
--
-- hold is nil but for the held key of a batch's run (held_state): true
-- while the run goes on, when the write only changes the state held;
-- false for the run's last check, whose write ends the run (flush).
local function write_state(alg, key, log, existed, x, y, z, idle, e, now, ox, oy, pw, hold)
  if existed and not pw and hold == nil and alg ~= SLIDING_WINDOW and alg ~= SLIDING_LOG and alg ~= CONCURRENCY and
    (idle == 0 or e >= idle + SLACK_MS * 1000 and e >= now + SLACK_MS * 1000) then
    -- The commonest write, written out: a key in use, under its
    -- parameters, whose TTL holds it long enough (see below): x, y or both.
    if x ~= ox then
      if y ~= oy then
        redis.call('HSET', key, 'x', format('%d', x), 'y', int(y))
      else
        redis.call('HSET', key, 'x', format('%d', x))
      end
    elseif y ~= oy then
      redis.call('HSET', key, 'y', int(y))
    end
    return
  end
  if not existed and idle == 0 then
    if hold == false then
      flush()
    end
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
  local wx, wy = x ~= ox or not existed, y ~= oy or not existed
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
  local ne, wz = false, alg == SLIDING_WINDOW
  if pw then
    wx, wy, ne = true, true, max(until_, e)
  elseif until_ > 0 then
    ne = until_
  end
  if wz then
    wx, wy = true, true
  end
  if hold == nil then
    put(key, wx and x, wy and y, wz and z, ne, pw)
    if until_ > 0 then
      redis.call('PEXPIRE', key, format('%d', floor((until_ - now) / 1000) + 1))
    end
    return
  end
  -- the held key: its fields as the write leaves them (x and y are the
  -- values given whether written or not: a field not written is unchanged)
  hx, hy, hexisted = x, y, true
  dx, dy, dz = dx or wx, dy or wy, dz or wz
  if wz then
    hz = z
  end
  if ne then
    he, de = ne, true
  end
  if pw then
    hp, dp = pw, true
  end
  if until_ > 0 then
    httl = floor((until_ - now) / 1000) + 1
  end
  if not hold then
    flush()
  end
end
