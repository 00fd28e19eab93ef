// Package algo holds the algorithms of sluice as pure steps: a function of
// (state, now, cost, limit) that returns the new state and the decision. The
// stores only keep state and call Step; the Redis store runs a Lua port of
// the same arithmetic, which the conformance tests hold to the same answers.
//
// All arithmetic is on integers: times in microseconds since the Unix epoch,
// counts, and credit units (see Params.A and Params.B) chosen so that every
// quantity a step computes stays an exact integer below 2^53 (the exactness
// limit of the doubles Lua computes with). sluice.Limit.Validate enforces
// the bounds that make this true, and the Lua port computes the same
// expressions in the same order.
package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Params are a limit's parameters in the units the steps use. Compile them
// once per limit; a store caches them beside the key's state.
type Params struct {
	Alg sluice.Algorithm
	// bucket and shapes are the algorithm's Desc.Bucket and Desc.Shapes,
	// kept here for the steps (beside Alg, in its padding: Params is copied
	// into every request).
	bucket BucketForm
	shapes bool
	N      int64 // Count
	P      int64 // Period in µs (window, or rate period)
	// A and B express the rate N/P exactly: credit accrues at A units per
	// µs and one request costs B units (A = N/g, B = P/g, g = gcd(N, P)).
	A, B    int64
	Burst   int64 // bucket capacity, or leaky bucket queue
	NoDelay int64 // leaky bucket
	Warm    int64 // warm-up period in µs
	TTL     int64 // concurrency lease TTL in µs
	Cap     int64 // largest cost of one request (Limit.Capacity)
	Full    int64 // bucket capacity in credit units: Cap·B

	// Precomputed for the buckets: dividers by A and B, and how far
	// (µs) a clock may go back before a bucket must refuse whatever it
	// holds: ⌈Full/A⌉ + 1.
	byA, byB divisor
	backstop int64
	// shutFull is ⌊(Full - B)/A⌋: how long (µs, or one more) a bucket
	// that has just room for one request takes to be full (see Closed).
	shutFull int64

	// cal is a calendar window's period and zone, nil for any other limit.
	cal *calendar
}

// Compile validates l and converts it into Params.
func Compile(l sluice.Limit) (Params, error) {
	if err := l.Validate(); err != nil {
		return Params{}, err
	}
	p := Params{
		Alg:     l.Algorithm,
		N:       l.Count,
		P:       int64(l.Period / time.Microsecond),
		Burst:   l.Burst,
		NoDelay: l.NoDelay,
		Warm:    int64(l.Warmup / time.Microsecond),
		TTL:     int64(l.LeaseTTL / time.Microsecond),
		Cap:     l.Capacity(),
		bucket:  descs[l.Algorithm].Bucket,
		shapes:  descs[l.Algorithm].Shapes,
	}
	if l.Calendar != 0 {
		loc, err := sluice.LoadZone(l.Zone) // loaded once by Validate: a cache hit
		if err != nil {
			return Params{}, err
		}
		p.cal = &calendar{unit: l.Calendar, loc: loc}
	}
	if p.P > 0 {
		g := gcd(p.N, p.P)
		p.A, p.B = p.N/g, p.P/g
		p.Full = p.Cap * p.B
		p.byA, p.byB = newDivisor(p.A), newDivisor(p.B)
		p.backstop = p.byA.ceil(p.Full) + 1
		p.shutFull = p.byA.div(p.Full - p.B)
	}
	return p, nil
}

// LongestDelay returns, for a leaky_bucket, the Delay (µs) of the last
// place of its queue: the one a unit-cost request gets when the queue
// holds all it can, (queue - nodelay) intervals. It is 0 for other limits.
func (p *Params) LongestDelay() int64 {
	if !p.shapes {
		return 0
	}
	return p.byA.ceil((p.Burst - p.NoDelay) * p.B)
}
