package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// BucketTo decides a token_bucket or gcra request of cost above 0 at time
// now (µs) against s, writing the decision into d, and reports true; for
// any other algorithm or a peek it does nothing and reports false (StepTo
// then decides). Its decision and state are StepTo's to the bit
// (TestBucketToIsStep): it is tokenBucket and gcra with tokenUsed,
// bucket, shift and the result's conversion written out in one function,
// because those layers cost more than their arithmetic on the path of
// nearly every decision. The request must have passed Check.
func BucketTo(p *Params, s *State, now, c int64, commit bool, d *sluice.Decision) bool {
	if c <= 0 {
		return false
	}
	var at, used int64
	switch p.bucket {
	case bucketTokens:
		at, used = tokenUsed(p, s, now)
	case bucketArrival:
		at = max(now, s.X-p.backstop)
		if s.X > at {
			used = (s.X-at)*p.A - s.Y
		}
	default:
		return false
	}
	// bucket, then shift
	allowed := used+c*p.B <= p.Full
	retry := int64(0)
	if allowed {
		used += c * p.B
	} else {
		retry = p.byA.ceil(used + c*p.B - p.Full)
	}
	reset := p.byA.ceil(used)
	if allowed && commit {
		bucketCharge(p, s, at, used, reset)
	}
	if late := at - now; late > 0 {
		retry += late
		reset += late
	}
	// Field by field: a composite literal is built on the stack and then
	// copied 16 bytes at a time, and each of those loads waits for the
	// two 8-byte stores it spans (a failed store-to-load forward, 40% of
	// this function's time, held under the entry's lock).
	d.Allowed = allowed
	d.Limit = p.Cap
	d.Remaining = p.byB.div(max(0, p.Full-used))
	d.RetryAfter = time.Duration(retry) * time.Microsecond
	d.ResetAfter = time.Duration(reset) * time.Microsecond
	d.Delay, d.Lease, d.Degraded = 0, 0, false
	return true
}

// bucketCharge stores the credit used after an admission at time at, whose
// debt takes reset µs to refill, as tokenBucket and gcra do.
func bucketCharge(p *Params, s *State, at, used, reset int64) {
	if p.bucket == bucketTokens {
		s.X, s.Y, s.Idle = used, at, at+reset
		return
	}
	// gcra: reset is ⌈used/A⌉, how far the arrival time is ahead of at.
	s.X, s.Y = at+reset, reset*p.A-used
	s.Idle = s.X
}
