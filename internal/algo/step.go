package algo

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// result is a decision in integer microseconds, converted to a
// sluice.Decision at the end of Step.
type result struct {
	allowed             bool
	limit, remaining    int64
	retry, reset, delay int64 // µs
	lease               uint64
}

// CheckCost reports whether cost is acceptable under p (l is for the
// message): the error is a *sluice.LimitError whose Field is "cost".
func (p *Params) CheckCost(cost int64, l sluice.Limit) error {
	if cost < 0 {
		return &sluice.LimitError{Algorithm: l.Algorithm, Field: "cost", Reason: fmt.Sprintf("%d is below zero under %s", cost, l), Err: sluice.ErrNegativeCost}
	}
	if cost > p.Cap {
		return &sluice.LimitError{Algorithm: l.Algorithm, Field: "cost", Reason: fmt.Sprintf("%d exceeds the capacity %d of %s", cost, p.Cap, l), Err: sluice.ErrCostExceedsCapacity}
	}
	return nil
}

// Check reports whether r's cost and MaxDelay are acceptable under p, which
// must be r.Limit compiled.
func (p *Params) Check(r sluice.Request) error {
	if r.MaxDelay < 0 {
		return fmt.Errorf("%w: %s for key %q under %s", sluice.ErrNegativeMaxDelay, r.MaxDelay, r.Key, r.Limit)
	}
	return p.CheckCost(r.Cost, r.Limit)
}

// NoMaxDelay is the maxDelay of Step for a request whose delay has no bound.
const NoMaxDelay = -1

// MaxDelay converts a Request's MaxDelay into Step's maxDelay: NoMaxDelay
// for 0 (no bound), otherwise whole µs, rounded down, since a delay is a
// whole number of µs (a bound of 1.5 µs admits a delay of 1 µs, not 2).
func MaxDelay(d time.Duration) int64 {
	if d == 0 {
		return NoMaxDelay
	}
	return int64(d / time.Microsecond)
}

// Step decides a request of the given cost at time now (µs since the Unix
// epoch) against state s. A request whose Delay would exceed maxDelay (µs;
// NoMaxDelay for no bound) is refused and not charged, with a RetryAfter
// that counts until it would be admitted with a Delay of at most maxDelay
// (only the leaky bucket has a Delay: an algorithm that adds one must
// apply maxDelay as shape does). When commit is true and the request is
// admitted,
// s is updated to charge it; otherwise s keeps its meaning (a step may still
// drop records that have expired, which changes no future decision). lease
// is the identifier recorded for an admitted concurrency request.
//
// Cost 0 is a peek: nothing is charged, Allowed, RetryAfter and Delay are
// those a unit-cost request would get, Remaining is what is left now.
//
// The request must have passed Check.
func Step(p *Params, s *State, now, cost, maxDelay int64, lease uint64, commit bool) sluice.Decision {
	var d sluice.Decision
	StepTo(p, s, now, cost, maxDelay, lease, commit, &d)
	return d
}

// StepTo is Step writing its decision into d, which is all written: a
// store's Take returns it without another copy.
func StepTo(p *Params, s *State, now, cost, maxDelay int64, lease uint64, commit bool, d *sluice.Decision) {
	if !BucketTo(p, s, now, cost, commit, d) {
		stepTo(p, s, now, cost, maxDelay, lease, commit, d)
	}
}

// stepTo is StepTo through the general step, which every algorithm and
// peek takes.
func stepTo(p *Params, s *State, now, cost, maxDelay int64, lease uint64, commit bool, d *sluice.Decision) {
	// Results are written through a pointer: returning them by value from
	// every layer copied more than the arithmetic cost.
	var r result
	if cost == 0 {
		var probe result
		step(p, s, now, 1, maxDelay, 0, false, &probe)
		step(p, s, now, 0, maxDelay, 0, false, &r)
		r.allowed, r.retry, r.delay = probe.allowed, probe.retry, probe.delay
	} else {
		step(p, s, now, cost, maxDelay, lease, commit, &r)
	}
	// Field by field, as in BucketTo: a literal's copy stalls on its own
	// stores.
	d.Allowed = r.allowed
	d.Limit = r.limit
	d.Remaining = max(0, r.remaining) // a window in debt (Adjust) holds more than its count
	d.RetryAfter = time.Duration(r.retry) * time.Microsecond
	d.ResetAfter = time.Duration(r.reset) * time.Microsecond
	d.Delay = time.Duration(r.delay) * time.Microsecond
	d.Lease, d.Degraded = r.lease, false
}

// step runs p's algorithm. It is the one switch on the algorithm beside
// the table (desc.go): a func value there would make s and r escape.
func step(p *Params, s *State, now, c, maxDelay int64, lease uint64, commit bool, r *result) {
	switch p.Alg {
	case sluice.AlgorithmFixedWindow:
		fixedWindow(p, s, now, c, commit, r)
	case sluice.AlgorithmSlidingLog:
		slidingLog(p, s, now, c, commit, r)
	case sluice.AlgorithmSlidingWindow:
		slidingWindow(p, s, now, c, commit, r)
	case sluice.AlgorithmTokenBucket:
		tokenBucket(p, s, now, c, commit, r)
	case sluice.AlgorithmGCRA, sluice.AlgorithmLeakyBucket:
		gcra(p, s, now, c, maxDelay, commit, r)
	case sluice.AlgorithmWarmUp:
		warmUp(p, s, now, c, commit, r)
	case sluice.AlgorithmConcurrency:
		concurrency(p, s, now, c, lease, commit, r)
	default:
		panic("algo: uncompiled params") // Compile rejects unknown algorithms
	}
}

// windowStart returns the start of the aligned window holding now, never
// earlier than the newest window the state has seen: if the clock goes back,
// requests keep counting against the newest window instead of an old, empty
// one. A step may roll the state over to a new window even when it refuses or
// does not commit: that changes no decision.
func windowStart(now, period, seen int64) int64 {
	start := now - now%period
	if now < 0 && now%period != 0 {
		start -= period
	}
	return max(start, seen)
}

// fixedWindow: X = window start, Y = count in that window.
// A calendar window's start and end are those of its calendar period.
func fixedWindow(p *Params, s *State, now, c int64, commit bool, r *result) {
	var start, end int64
	if p.cal == nil {
		start = windowStart(now, p.P, s.X)
		end = start + p.P
	} else {
		start, end = p.cal.window(now, s.X)
	}
	if start != s.X {
		// Roll over even if this request is refused, so the window never
		// moves back when the clock does.
		s.X, s.Y = start, 0
	}
	count := s.Y
	*r = result{limit: p.N}
	if count+c <= p.N {
		r.allowed = true
		count += c
		if commit && c > 0 {
			s.X, s.Y, s.Idle = start, count, end
		}
	} else {
		r.retry = end - now // the next window admits any cost up to N
	}
	r.remaining = max(0, p.N-count) // a count carried over from a higher limit may exceed N
	if count > 0 {
		r.reset = end - now
	}
}

// slidingLog: Log holds (time, cost) of admitted requests in time order,
// Y = their total cost, Z = the latest time the log has been read at.
func slidingLog(p *Params, s *State, now, c int64, commit bool, r *result) {
	// Time never goes backwards for the log: if the clock does, time stands
	// still at the latest reading until the clock catches up, so records
	// dropped as expired can never have been needed.
	t := max(now, s.Z)
	s.Z = t
	s.prune(t - p.P)
	*r = result{limit: p.N}
	used := s.Y
	newest := s.newest()
	if used+c <= p.N {
		r.allowed = true
		used += c
		if c > 0 {
			newest = t
		}
		if commit && c > 0 {
			if live := s.live(); len(live) > 0 && live[len(live)-1].T == t {
				s.Log[len(s.Log)-1].Cost += c
			} else {
				s.push(Entry{T: t, Cost: c})
			}
			s.Y += c
			s.Idle = t + p.P
		}
	} else {
		// Admitted once enough of the oldest records have left the window.
		r.retry = s.covering(used+c-p.N) + p.P - now
	}
	r.remaining = max(0, p.N-used) // as in fixedWindow
	if newest >= 0 && used > 0 {
		r.reset = newest + p.P - now
	}
}

// slidingWindow: X = current window start, Y = its count, Z = count of the
// window before it.
//
// The previous window's count is weighted by the part of it the sliding
// window still covers, measured in steps of 1/65536 of the window
// (weightOne), and the weighted count is rounded up. The steps keep every
// product below 2^53: a window is at most 24h (2^37 µs) and a count at most
// 2^36.
func slidingWindow(p *Params, s *State, now, c int64, commit bool, r *result) {
	start := windowStart(now, p.P, s.X)
	if start != s.X { // roll over, as in fixedWindow
		prev := int64(0)
		if start-s.X == p.P {
			prev = s.Y
		}
		s.X, s.Y, s.Z = start, 0, prev
	}
	cur, prev := s.Y, s.Z
	elapsed := max(now-start, 0)
	weighted := ceilDiv(prev*(weightOne-ceilDiv(elapsed*weightOne, p.P)), weightOne)
	*r = result{limit: p.N}
	if weighted+cur+c <= p.N {
		r.allowed = true
		cur += c
		if commit && c > 0 {
			s.Y, s.Idle = cur, start+2*p.P
		}
	} else {
		r.retry = slidingWindowAdmits(p, start, cur, prev, c) - now
	}
	r.remaining = max(0, p.N-weighted-cur)
	switch {
	case cur > 0:
		r.reset = start + 2*p.P - now
	case weighted > 0:
		r.reset = start + p.P - now
	}
}

// weightOne is the weight of a whole previous window in slidingWindow.
const weightOne = 1 << 16

// slidingWindowAdmits returns the earliest time at which a request of cost c
// is admitted, given the window starting at start with counts cur and prev
// and no other traffic.
func slidingWindowAdmits(p *Params, start, cur, prev, c int64) int64 {
	// With counts (cur, prev), cost c fits once the weight step
	// f = ⌈e·65536/P⌉ at elapsed time e satisfies
	// ⌈prev·(65536-f)/65536⌉ ≤ k, k = N-cur-c: from f = 65536 -
	// ⌊k·65536/prev⌋ on, that is from e = ⌊(f-1)·P/65536⌋ + 1.
	earliest := func(k, prev int64) int64 {
		if k < 0 {
			return p.P
		}
		if prev <= k {
			return 0
		}
		f := weightOne - k*weightOne/prev
		return (f-1)*p.P/weightOne + 1
	}
	if e := earliest(p.N-cur-c, prev); e < p.P {
		return start + e
	}
	if e := earliest(p.N-c, cur); e < p.P {
		return start + p.P + e
	}
	return start + 2*p.P
}

// bucket decides cost c against a bucket whose used credit is debt units
// (0 = full, p.Full = empty). It returns the result and the debt after.
// Token bucket, GCRA and the leaky bucket share this arithmetic and differ
// only in how they store the debt.
func bucket(p *Params, debt, c int64, r *result) int64 {
	*r = result{limit: p.Cap}
	if need := c * p.B; debt+need <= p.Full {
		r.allowed = true
		debt += need
	} else {
		r.retry = p.byA.ceil(debt + need - p.Full)
	}
	r.remaining = p.byB.div(max(0, p.Full-debt))
	r.reset = p.byA.ceil(debt)
	return debt
}

// tokenBucket: X = used credit (units) at time Y. Credit refills exactly, A
// units per µs. Read backwards (the clock went back), the same state means
// more credit used, so the bucket decides exactly as GCRA does at any
// clock reading.
func tokenBucket(p *Params, s *State, now, c int64, commit bool, r *result) {
	at, used := tokenUsed(p, s, now)
	used = bucket(p, used, c, r)
	idle := at + r.reset
	shift(r, at-now)
	if r.allowed && commit && c > 0 {
		s.X, s.Y, s.Idle = used, at, idle
	}
}

// tokenUsed returns the time a token bucket decides at (now, or later if
// the clock went back: see gcra) and the credit used then.
func tokenUsed(p *Params, s *State, now int64) (at, used int64) {
	at = max(now, s.Y-p.backstop)
	used = s.X
	if e := at - s.Y; e < 0 {
		used -= e * p.A
	} else if used > 0 {
		// Refill: used falls by A per µs, to 0 at the latest. e·A is
		// taken in 128 bits: it overflows 64 after a long idle time.
		if hi, lo := bits.Mul64(uint64(e), uint64(p.A)); hi != 0 || lo >= uint64(used) {
			used = 0
		} else {
			used -= int64(lo)
		}
	}
	return at, used
}

// shift moves the times of a decision taken at a later time than now (the
// clock went back) onto the real clock.
func shift(r *result, d int64) {
	if d > 0 {
		r.retry += d
		r.reset += d
	}
}

// gcra (and the leaky bucket): the theoretical arrival time TAT = X - Y/A µs
// with 0 ≤ Y < A, so that a rate that is not a whole number of µs per request
// stays exact. The debt at now is (TAT - now)·A units.
func gcra(p *Params, s *State, now, c, maxDelay int64, commit bool, r *result) {
	// If the clock has gone back further than a full bucket, decide as if
	// it stood at the latest time that keeps the arithmetic small: the
	// request is refused either way, and the answer's times are shifted back
	// to the real clock.
	at := max(now, s.X-p.backstop)
	debt := int64(0)
	if s.X > at {
		debt = (s.X-at)*p.A - s.Y
	}
	before := debt
	debt = bucket(p, debt, c, r)
	if p.shapes {
		debt = shape(p, before, debt, maxDelay, r)
	}
	shift(r, at-now)
	if r.allowed && commit && c > 0 {
		ahead := p.byA.ceil(debt)
		s.X, s.Y = at+ahead, ahead*p.A-debt
		s.Idle = s.X
	}
}

// shape turns the bucket's decision r on debt before (now debt after) into
// the leaky bucket's, and returns the debt after it. An admitted request
// starts once the queue ahead has drained to the nodelay allowance (nginx
// limit_req: (excess - delay) / rate). A request that would wait longer
// than maxDelay is refused uncharged: the queue ahead shrinks by 1 µs of
// delay per µs, so it is admitted within maxDelay after wait - maxDelay µs,
// or when the bucket admits it, whichever is later.
func shape(p *Params, before, debt, maxDelay int64, r *result) int64 {
	r.limit = p.Burst + 1
	wait := p.byA.ceil(max(0, before-p.NoDelay*p.B))
	if maxDelay < 0 || wait <= maxDelay {
		if r.allowed {
			r.delay = wait
		}
		return debt
	}
	*r = result{
		limit:     r.limit,
		remaining: p.byB.div(max(0, p.Full-before)),
		retry:     max(r.retry, wait-maxDelay),
		reset:     p.byA.ceil(before),
	}
	return before
}

// warmUp is Guava's SmoothWarmingUp with a cold factor of 3. X = the time
// the next request may start (Guava's nextFreeTicket), Y = warmth: how much
// of the warm-up period has been used, in µs (0 = cold, Warm = fully warm).
//
// Guava stores permits; here stored permits are measured in the time they
// are worth at the stable rate, so that with a cold factor of 3 the maximum
// is exactly the warm-up period W and cooling down restores 1 µs of it per
// µs of idleness. Taking the stretch [x1, x2] of stored time costs its length
// plus, for the part above W/2 where the interval climbs linearly from the
// stable one to three times it, an extra (u2² - u1²)/(2W) with u = 2x - W.
func warmUp(p *Params, s *State, now, c int64, commit bool, r *result) {
	next, warmth := s.X, s.Y
	if now > next {
		warmth = max(0, warmth-(now-next))
		next = now
	}
	*r = result{limit: 1}
	if next > now {
		r.retry = next - now
		r.reset = next - now
		return
	}
	r.allowed = true
	if c == 0 {
		r.remaining = 1
		return
	}
	stored := p.Warm - warmth
	stable := ceilDiv(c*p.P, p.N) // c requests at the stable rate, µs
	take := min(stored, stable)
	u2 := max(0, 2*stored-p.Warm)
	u1 := max(0, 2*(stored-take)-p.Warm)
	extra := int64(0)
	if u2 > u1 {
		extra = ceilDiv((u2-u1)*(u2+u1), 2*p.Warm)
	}
	next = now + stable + extra
	r.reset = next - now
	if commit {
		s.X, s.Y = next, warmth+take
		s.Idle = next + s.Y // cooling back to cold takes as long as the warmth
	}
}

// concurrency: Log holds leases (expiry, cost, id) in expiry order, Y = their
// total cost, Z = the latest time the leases have been read at (see
// slidingLog).
func concurrency(p *Params, s *State, now, c int64, lease uint64, commit bool, r *result) {
	now = max(now, s.Z)
	s.Z = now
	s.prune(now)
	*r = result{limit: p.N}
	used := s.Y
	last := s.newest()
	if used+c <= p.N {
		r.allowed = true
		used += c
		if c > 0 {
			// Expiries stay in order even if the clock goes back.
			last = max(now+p.TTL, last)
		}
		if commit && c > 0 {
			s.push(Entry{T: last, Cost: c, ID: lease})
			s.Y += c
			s.Idle = last
			r.lease = lease
		}
	} else {
		r.retry = s.covering(used+c-p.N) - now
	}
	r.remaining = max(0, p.N-used) // as in fixedWindow
	if used > 0 {
		r.reset = last - now
	}
}

// Release removes the concurrency lease id from s, reporting whether it was
// held.
func Release(s *State, id uint64) bool {
	for i, e := range s.live() {
		if e.ID == id {
			s.Y -= e.Cost
			s.remove(i)
			return true
		}
	}
	return false
}
