package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Closed returns, for a token_bucket or gcra state s just decided at now,
// how long it refuses a request of cost 1, as one word a store can publish
// for readers that hold no lock (memstore refuses such requests without
// taking the key's lock): 0 if it admits one at now (and for every other
// algorithm, and for a W before 1970), otherwise W<<1 | b, where W is the first µs at which it
// admits one and b the one bit RefuseClosed needs for the time the bucket
// is full again.
//
// While it refuses, BucketTo's answer is linear in the time: the credit
// used falls by A units per µs (token_bucket: X - (t - Y)·A; gcra: the
// arrival time X ahead of t, times A, less Y), so a request of cost 1 at t
// is refused exactly while t < W, with RetryAfter W - t, ResetAfter F - t
// (F: the time the bucket is full), Remaining 0, and the state unchanged.
// F - W is ⌊(Full - B)/A⌋ or one more; b says which. TestClosedIsBucketTo
// holds RefuseClosed to BucketTo over random limits, states and times.
func Closed(p *Params, s *State, now int64) int64 {
	var w, f int64
	switch p.bucket {
	case bucketTokens:
		// used(t) + B > Full  ⟺  (t - Y)·A < X + B - Full
		w = s.Y + ceilSigned(p.byA, s.X+p.B-p.Full)
		f = s.Y + ceilSigned(p.byA, s.X)
	case bucketArrival:
		// (X - t)·A - Y > Full - B  ⟺  t < X - (Full - B + Y)/A
		w = s.X - p.byA.div(p.Full-p.B+s.Y)
		f = s.X
	default:
		return 0
	}
	if w <= now || w <= 0 { // a store's times are after 1970: a W before cannot be published
		return 0
	}
	return w<<1 | (f - w - p.shutFull)
}

// RefuseClosed writes into d the decision BucketTo makes for a request of
// cost 1 at now against a state for which Closed returned w, and reports
// true, if that decision is a refusal (now before W); otherwise it reports
// false and leaves d as it was. At a now earlier than the time w was
// computed at (the clock gone back: memstore's coarse reading after a
// decision at the exact time) it is still BucketTo's answer, wherever
// BucketTo's arithmetic is exact (the credit the earlier time adds stays
// below 2^53).
func RefuseClosed(p *Params, w, now int64, d *sluice.Decision) bool {
	until := w >> 1
	if now >= until {
		return false
	}
	full := until + p.shutFull + w&1
	d.Allowed = false
	d.Limit = p.Cap
	d.Remaining = 0
	d.RetryAfter = time.Duration(until-now) * time.Microsecond
	d.ResetAfter = time.Duration(full-now) * time.Microsecond
	d.Delay, d.Lease, d.Degraded = 0, 0, false
	return true
}

// ceilSigned returns ⌈n/d⌉ for any n with |n| below 2^53 - d.
func ceilSigned(v divisor, n int64) int64 {
	if n >= 0 {
		return v.ceil(n)
	}
	return -v.div(-n)
}
