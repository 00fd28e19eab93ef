-- reply.lua: the decisions of a check as the reply encodes them.

-- emit appends the decisions of requests rs to out after index o and
-- returns the new last index: 6 values per request (allowed, limit,
-- remaining, retry, reset, delay), or 8, the lease and undo token last,
-- when any request has a lease or an undo token (the shorter reply saves
-- the server two strings per decision). When marked, the stride itself
-- comes first: a batch script's reply is one flat array, the checks'
-- results one after another, which costs the server less than an array
-- per check.
local function emit(out, o, rs, marked)
  local stride = 6
  for i = 1, #rs do
    if rs[i].rl ~= '' or rs[i].ru ~= '' then
      stride = 8
    end
  end
  if marked then
    o = o + 1
    out[o] = stride
  end
  for i = 1, #rs do
    local r = rs[i]
    local allowed = 0
    if r.allowed then
      allowed = 1
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] =
      allowed, r.p.limit, r.remaining, r.retry, r.reset, r.delay
    if stride == 8 then
      out[o + 7], out[o + 8] = r.rl, r.ru
    end
    o = o + stride
  end
  return o
end

-- packed returns the reply of a lone request that a token bucket, GCRA or
-- a fixed or sliding window admits as one integer, reset x (limit + 1) +
-- remaining, or nil for another decision or one that does not fit. A table
-- reply costs the server about 6k instructions; an integer, 0.7k. (These
-- algorithms' limit is the capacity, which the caller knows: batch.go's
-- values reads it.)
local function packed(alg, limit, allowed, remaining, retry, reset, delay)
  if allowed and retry == 0 and delay == 0 and remaining >= 0 and remaining <= limit and reset >= 0 and
    (alg == GCRA or alg == TOKEN_BUCKET or alg == FIXED_WINDOW or alg == SLIDING_WINDOW) then
    local v = reset * (limit + 1) + remaining
    if v < 9007199254740992 then -- exact in a double, and in Redis's integer
      return v
    end
  end
  return nil
end
