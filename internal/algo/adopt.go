package algo

// Same reports whether a state kept under p is read under q as it is,
// without Adopt: the parameters its algorithm's state depends on are equal
// (the limit itself, or one written differently, such as 2/2s and 1/s).
// They are the parameters the Lua port is sent (scripts/algorithms.lua), which
// stores them with the state and compares them the same way.
func (p *Params) Same(q *Params) bool {
	if p.Alg != q.Alg {
		return false
	}
	for _, w := range p.Desc().Wire {
		if w.Of(p) != w.Of(q) {
			return false
		}
	}
	return (p.cal == nil) == (q.cal == nil) && (p.cal == nil || p.cal.unit == q.cal.unit && p.cal.loc.String() == q.cal.loc.String())
}

// Adopt carries s, a state kept under the parameters old, over to p (of
// the same algorithm) at time now (µs), by the rules sluice.Limit
// documents. The Lua port (scripts/adopt.lua) computes the same. Adopt
// with old.Same(p) changes nothing a decision would see.
func Adopt(old, p *Params, s *State, now int64) {
	if adopt := p.Desc().adopt; adopt != nil {
		adopt(old, p, s, now)
	}
	// An algorithm without adopt (a log) keeps its state as it is.
	s.Idle = max(s.Idle, AdoptedIdle(p, s))
}

// AdoptedIdle is the time (µs) from which s, carried over to p, is fresh
// again (0 for concurrency, whose leases keep their expiry): a store keeps the
// state until then, although no decision under p has charged it yet (a
// longer window or a slower refill keeps it longer than the old limit
// did). The Lua port computes the same to extend the key's TTL.
func AdoptedIdle(p *Params, s *State) int64 {
	return p.Desc().idle(p, s)
}

// adoptWindow keeps the count Y of the window starting at X if that window
// has not ended by now, moving it to the window of p holding now (or X, if
// the clock has gone back before it); otherwise the state starts afresh. A
// sliding window's previous count (Z) is dropped.
func adoptWindow(old, p *Params, s *State, now int64, sliding bool) {
	var end int64
	if old.cal != nil {
		_, end = old.cal.compute(s.X)
	} else {
		end = s.X + old.P
	}
	if now >= end || s.Y == 0 {
		s.X, s.Y, s.Z = 0, 0, 0
		return
	}
	at := max(now, s.X)
	if p.cal != nil {
		s.X, _ = p.cal.compute(at)
	} else {
		s.X = windowStart(at, p.P, 0)
	}
	if sliding {
		s.Z = 0
	}
}

// requests converts debt, credit units of old, into the same number of
// whole requests (rounded up) in units of p, at most p's full bucket.
func requests(old, p *Params, debt int64) int64 {
	n := ceilDiv(debt, old.B)
	if n >= p.Cap {
		return p.Full
	}
	return n * p.B
}

// adoptGCRA keeps the requests a GCRA or leaky bucket holds at now (its
// debt, the queue of a leaky bucket) under p: the theoretical arrival time
// is set so that p's debt at now is that many requests.
func adoptGCRA(old, p *Params, s *State, now int64) {
	at := max(now, s.X-old.backstop) // as gcra does
	debt := int64(0)
	if s.X > at {
		debt = (s.X-at)*old.A - s.Y
	}
	debt = requests(old, p, debt)
	if debt == 0 {
		s.X, s.Y = 0, 0
		return
	}
	ahead := p.byA.ceil(debt)
	s.X, s.Y = at+ahead, ahead*p.A-debt
}
