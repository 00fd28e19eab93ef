-- lease.lua: hand out quota leases for n requests, all-or-nothing (see
-- lease.go). KEYS and ARGV as in args.lua, the count always sent; each
-- request is "<limit>|<cost>,<want>," under a scalar algorithm whose room
-- can be handed out ahead of use: fixed_window (1), token_bucket (4) or
-- gcra (5). <cost> is what the instance must have now, <want> (at least
-- <cost>, at most the limit's capacity) what it would like to hold.
--
-- If every request has room for its cost, each is charged min(want, room),
-- and never less than its cost, in one step of its algorithm, exactly as a
-- request of that cost would be: what a lease hands out was counted here
-- before any instance admits a request with it. Otherwise nothing is
-- written; a refused request reports the time until want fits (so that an
-- instance asks again when a lease is worth a call), a request admitted
-- alone reports a peek with allowed = 0 and no retry.
--
-- Returns 8 integers per request: allowed, limit, remaining, retry (µs),
-- reset (µs), delay (µs), granted, and the window start (fixed_window; 0
-- otherwise), which refund.lua needs to give back what is left unspent.
local now = clock()
local n = tonumber(argv[2])
local rs = {}
local b, k, all = 3, 1, true
for i = 1, n do
  local r
  r, b, k = load(k, b, now) -- carried over to the request's limit (stateio.lua)
  local alg = r.p.alg
  if alg ~= FIXED_WINDOW and alg ~= TOKEN_BUCKET and alg ~= GCRA then
    error('sluice: lease of algorithm ' .. alg .. ' (only fixed_window, token_bucket and gcra lease)')
  end
  local want = tonumber(r.lease)
  if not want or want < r.c or want > r.p.limit then
    error('sluice: malformed lease want "' .. r.lease .. '"')
  end
  local _, room = peek(r.f, r.p, r.x, r.y, r.z, now)
  local g = min(want, room)
  if g < r.c then
    g = r.c
  end
  local start
  r.allowed, r.remaining, r.retry, r.reset, r.delay, r.sx, r.sy, r.sz, r.idle, start =
    r.f(r.p, r.x, r.y, r.z, now, g, true)
  r.g, r.start = g, start or 0
  if not r.allowed and want > g then
    local _, _, retry = r.f(r.p, r.x, r.y, r.z, now, want, false)
    r.retry = retry
  end
  all = all and r.allowed
  rs[i] = r
end
local reply = {}
for i = 1, n do
  local r = rs[i]
  local a, g = 0, 0
  if all then
    a, g = 1, r.g
    save(r, now)
  elseif r.allowed then
    local _
    _, r.remaining, _, r.reset = peek(r.f, r.p, r.x, r.y, r.z, now)
    r.retry = 0
  end
  local o = 8 * (i - 1)
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = a, r.p.limit, r.remaining, r.retry
  reply[o + 5], reply[o + 6], reply[o + 7], reply[o + 8] = r.reset, r.delay, g, r.start
end
return reply
