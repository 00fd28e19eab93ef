package algo

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// exact is 2^53: a bucket's debt stays below it, so that Lua's doubles
// hold it exactly.
const exact = 1 << 53

// CheckAdjust reports whether r, whose Cost is a signed delta, may adjust a
// state under p (r.Limit compiled): its magnitude at most r.Limit.MaxAdjust,
// and an algorithm whose state is usage (not concurrency, which holds
// leases).
func (p *Params) CheckAdjust(r sluice.Request) error {
	l := r.Limit
	if p.Desc().adjust == nil {
		return &sluice.LimitError{Algorithm: l.Algorithm, Field: "algorithm", Err: sluice.ErrNotAdjustable,
			Reason: fmt.Sprintf("%s holds leases, not usage: give a lease back with Release (key %q)", l, r.Key)}
	}
	if m := l.MaxAdjust(); r.Cost > m || r.Cost < -m {
		return &sluice.LimitError{Algorithm: l.Algorithm, Field: "cost", Err: sluice.ErrCostExceedsCapacity,
			Reason: fmt.Sprintf("adjustment %d exceeds %d, %d times the capacity of %s (key %q): settle larger costs in several adjustments", r.Cost, m, sluice.AdjustCapacities, l, r.Key)}
	}
	return nil
}

// debtCeiling is how many capacities a state may hold, an exhausted limit
// and the debt past it.
const debtCeiling = 1 + sluice.AdjustCapacities

// Adjust changes the usage recorded in s by delta at now (µs): a positive
// delta is charged even past the limit, into a debt of at most
// AdjustCapacities capacities beyond an exhausted limit (the excess is
// dropped); a negative one is refunded down to an unused limit, no
// further. It returns the state after it as a peek (Step with cost 0)
// reports it. Delta 0 changes nothing.
//
// What each algorithm records: the windows add to (or take from) the count
// of the current window (sliding_window takes a refund the current window
// cannot give from the previous one; sliding_log records a charge at now
// and refunds from its newest records); the buckets move their debt
// (token_bucket's used credit, gcra's and leaky_bucket's theoretical
// arrival time); warm_up moves the time of its next admission by the
// delta's time at the stable rate, never before now.
//
// The request must have passed CheckAdjust.
func Adjust(p *Params, s *State, now, delta int64) sluice.Decision {
	if delta != 0 {
		var r result
		step(p, s, now, 0, NoMaxDelay, 0, false, &r) // roll windows over, prune logs
		adjust := p.Desc().adjust
		if adjust == nil {
			panic("algo: Adjust of " + p.Alg.String()) // CheckAdjust refuses it
		}
		adjust(p, s, now, delta)
	}
	d := Step(p, s, now, 0, NoMaxDelay, 0, false)
	idle := now + int64(d.ResetAfter/time.Microsecond)
	if d := p.Desc(); d.Paced {
		idle = d.idle(p, s)
	}
	if delta > 0 || s.Idle > 0 {
		s.Idle = max(s.Idle, idle)
	}
	return d
}

// adjustCount returns count + delta within [0, ceiling], never lowered by a
// charge (a count already past the ceiling stays).
func adjustCount(count, delta, ceiling int64) int64 {
	if delta > 0 {
		return max(count, min(count+delta, ceiling))
	}
	return max(0, count+delta)
}

// adjustTwo is adjustCount on the current window's count cur, a refund
// taking from the previous window's count prev what cur cannot give.
func adjustTwo(cur, prev, delta, ceiling int64) (int64, int64) {
	if delta > 0 || cur+delta >= 0 {
		return adjustCount(cur, delta, ceiling), prev
	}
	return 0, max(0, prev+cur+delta)
}

// adjustLog records a charge as a record at the log's time (Z, which the
// step has brought up to now), or takes a refund from the newest records.
func adjustLog(p *Params, s *State, delta int64) {
	if delta > 0 {
		c := adjustCount(s.Y, delta, debtCeiling*p.N) - s.Y
		if c == 0 {
			return
		}
		if live := s.live(); len(live) > 0 && live[len(live)-1].T == s.Z {
			s.Log[len(s.Log)-1].Cost += c
		} else {
			s.push(Entry{T: s.Z, Cost: c})
		}
		s.Y += c
		return
	}
	for rest := -delta; rest > 0 && len(s.live()) > 0; {
		last := &s.Log[len(s.Log)-1]
		take := min(rest, last.Cost)
		last.Cost -= take
		s.Y -= take
		rest -= take
		if last.Cost == 0 {
			s.remove(len(s.live()) - 1)
		}
	}
}

// adjustDebt returns a bucket's debt (credit units used) after delta, the
// debt measured at a time hidden µs after now (a clock that went back, or
// a debt deeper than a full bucket: see gcra). A charge takes the debt at
// now to at most debtCeiling buckets (and 2^53); a refund, to zero.
func adjustDebt(p *Params, debt, hidden, delta int64) int64 {
	if delta < 0 {
		return max(0, debt+delta*p.B)
	}
	ceiling := min(debtCeiling*p.Full, exact)
	if hidden > 0 {
		if hidden > exact/p.A {
			return debt
		}
		ceiling -= hidden * p.A
	}
	return max(debt, min(debt+delta*p.B, ceiling))
}

// adjustGCRA moves the theoretical arrival time by the delta's credit. The
// debt is measured at now unless the clock has gone back further than the
// deepest debt (gcra's backstop, for a state that may hold debtCeiling
// buckets).
func adjustGCRA(p *Params, s *State, now, delta int64) {
	at := max(now, s.X-(ceilDiv(min(debtCeiling*p.Full, exact), p.A)+1))
	debt := int64(0)
	if s.X > at {
		debt = (s.X-at)*p.A - s.Y
	}
	debt = adjustDebt(p, debt, at-now, delta)
	ahead := ceilDiv(debt, p.A)
	s.X, s.Y = at+ahead, ahead*p.A-debt
}

// adjustWarmUp moves the time of the next admission by the delta's time at
// the stable rate: a charge to at most AdjustCapacities periods ahead of
// now (as many capacities' worth), a refund to now at the earliest. Warmth cools
// as the step would have cooled it by now.
func adjustWarmUp(p *Params, s *State, now, delta int64) {
	next, warmth := s.X, s.Y
	if now > next {
		warmth = max(0, warmth-(now-next))
		next = now
	}
	if delta > 0 {
		next = max(next, min(next+ceilDiv(delta*p.P, p.N), now+sluice.AdjustCapacities*p.P))
	} else {
		next = max(now, next-(-delta)*p.P/p.N)
	}
	s.X, s.Y = next, warmth
}
