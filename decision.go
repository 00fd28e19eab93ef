package sluice

import "time"

// Decision is the answer to one request. The zero value is a refusal with
// nothing known.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	// A shaping limit may admit a request with a Delay.
	Allowed bool

	// Limit is the capacity of the limit that decided: Count for windows and
	// concurrency, Burst for token_bucket and gcra, queue+1 for
	// leaky_bucket, 1 for warm_up (which paces one request at a time). It is
	// the "limit" a client sees in response headers.
	Limit int64

	// Remaining is how many more unit-cost requests would be admitted right
	// now, after this one was charged.
	Remaining int64

	// RetryAfter is, for a refused request, how long until the same request
	// (same cost) would be admitted if nothing else happened meanwhile. It is
	// zero when Allowed. For concurrency it is the time until enough leases
	// expire, an upper bound: releases usually come sooner.
	RetryAfter time.Duration

	// ResetAfter is how long until the limit is fully restored, as if it
	// had never been used (the window ends, the bucket is full again).
	ResetAfter time.Duration

	// Delay is, for an admitted request under a shaping limit
	// (leaky_bucket), how long the caller should wait before starting the
	// work so that admitted requests leave at a constant rate. Zero
	// otherwise. Limiter.Wait sleeps it for you.
	Delay time.Duration

	// Lease identifies the in-flight slot held by a request admitted under
	// a concurrency limit; give it back with Limiter.Release. Zero for other
	// limits, for refusals and for peeks.
	Lease uint64

	// Degraded reports that the store meant to decide could not, and the
	// decision was made another way: by a local fallback limiter, or by a
	// failure mode that admits or refuses without counting (see the failover
	// package). Stores that decide normally leave it false.
	Degraded bool

	// Uncounted reports an admission that counted nothing: a failure mode
	// (open) let the request through while the store could not decide.
	// Degraded is set too. decide reports such a request as
	// AdmittedUncounted rather than Admitted.
	Uncounted bool
}

// binding returns the decision that governs a combined check, and its
// index: a refusal with the longest RetryAfter if any request was refused,
// otherwise the admitted decision with the fewest Remaining. Delay is the
// longest of all, since the caller must honour every shaping limit.
func binding(ds []Decision) (Decision, int) {
	if len(ds) == 0 {
		return Decision{Allowed: true}, -1
	}
	b, bi := ds[0], 0
	var delay time.Duration
	for i, d := range ds {
		delay = max(delay, d.Delay)
		switch {
		case !d.Allowed && (b.Allowed || d.RetryAfter > b.RetryAfter):
			b, bi = d, i
		case d.Allowed && b.Allowed && d.Remaining < b.Remaining:
			b, bi = d, i
		}
	}
	if b.Allowed {
		b.Delay = delay
	}
	return b, bi
}
