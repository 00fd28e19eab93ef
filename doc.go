// Package sluice decides, for every request, whether to admit it, admit it
// after a short delay, or refuse it with the time after which it would be
// admitted, by any key and with any of the classic rate limiting algorithms.
//
// The same decision comes out whether the state lives in the process
// (package memstore, the default) or in a Redis shared by many instances
// (package redisstore): every algorithm is one integer arithmetic, run in Go
// by one store and in Lua by the other, and the two are tested against each
// other step by step.
//
// # Using it
//
// Build a Limiter on a Store and ask it about a key under a Limit:
//
//	store, _ := memstore.New(memstore.Config{})
//	limiter := sluice.New(store)
//	d, err := limiter.Allow(ctx, "user:42", sluice.TokenBucket(sluice.PerSecond(10), 20))
//	if err == nil && !d.Allowed {
//		// answer 429 with Retry-After: d.RetryAfter
//	}
//
// Limiter.Check limits one request on several dimensions at once (global,
// per IP, per user), all-or-nothing. Limiter.Wait blocks until a request is
// admitted, or refuses at once when that would outlast the context's
// deadline.
//
// # Choosing an algorithm
//
//	algorithm        guarantee                                         state per key
//	FixedWindow      ≤ n per aligned window; up to 2n across a boundary  2 integers
//	SlidingLog       ≤ n in any window of length w (exact)               24 B per request in the window
//	SlidingWindow    ≤ n per aligned window, smooth estimate in between  3 integers
//	TokenBucket      ≤ burst + rate·t over any interval t                2 integers
//	GCRA             same admissions as TokenBucket                      1 timestamp (+ remainder)
//	LeakyBucket      admits with a Delay: a constant outflow rate        1 timestamp (+ remainder)
//	WarmUp           rate climbs from rate/3 after idleness (Guava)      2 integers
//	Concurrency      ≤ n in flight; leases expire after a TTL            24 B per lease
//
// TokenBucket or GCRA suit most APIs: they allow short bursts and hold the
// average. SlidingWindow suits quotas per minute or hour ("60 per minute")
// without the fixed window's boundary burst; SlidingLog when the bound must
// be exact and n is small. LeakyBucket smooths traffic toward a fragile
// backend instead of refusing it; WarmUp protects a backend that is slow
// when cold; Concurrency bounds work in progress rather than arrivals.
//
// # Time and arithmetic
//
// Times are whole microseconds since the Unix epoch, read by the store (the
// monotonic clock for memstore, Redis TIME for redisstore). Rates are kept
// as exact fractions (3/s is three per 10⁶ µs, not one per 333,333 µs), so
// limits do not drift. If a store's clock goes backwards, no algorithm
// admits more than if it had stood still.
//
// # Keys and limits
//
// State is kept per (key, Limit): one key under two limits is two states,
// and changing a limit's parameters starts its keys afresh. Keys are opaque
// strings; the caller chooses them ("user:42", "ip:203.0.113.7").
package sluice
