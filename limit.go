package sluice

import (
	"fmt"
	"strconv"
	"time"
)

// Algorithm names the arithmetic a Limit uses. Its String form (for example
// "token_bucket") is the name used in configuration files and metrics.
type Algorithm uint8

// The algorithms sluice implements. Each one is built by the constructor of
// the same name (FixedWindow, SlidingLog, ...), which documents its guarantee.
const (
	AlgorithmFixedWindow   Algorithm = iota + 1 // see FixedWindow
	AlgorithmSlidingLog                         // see SlidingLog
	AlgorithmSlidingWindow                      // see SlidingWindow
	AlgorithmTokenBucket                        // see TokenBucket
	AlgorithmGCRA                               // see GCRA
	AlgorithmLeakyBucket                        // see LeakyBucket
	AlgorithmWarmUp                             // see WarmUp
	AlgorithmConcurrency                        // see Concurrency
)

var algorithmNames = [...]string{
	AlgorithmFixedWindow:   "fixed_window",
	AlgorithmSlidingLog:    "sliding_log",
	AlgorithmSlidingWindow: "sliding_window",
	AlgorithmTokenBucket:   "token_bucket",
	AlgorithmGCRA:          "gcra",
	AlgorithmLeakyBucket:   "leaky_bucket",
	AlgorithmWarmUp:        "warm_up",
	AlgorithmConcurrency:   "concurrency",
}

// String returns the configuration name of a, such as "sliding_window".
func (a Algorithm) String() string {
	if a == 0 || int(a) >= len(algorithmNames) {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a]
}

// ParseAlgorithm returns the Algorithm whose String form is name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n != "" && n == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)", ErrInvalidLimit, name)
}

// Rate is Count events per Period, as in "100/s". Build one with PerSecond,
// PerMinute, PerHour or Per.
type Rate struct {
	Count  int64
	Period time.Duration
}

// Per returns the rate of n events per period d.
func Per(n int64, d time.Duration) Rate { return Rate{Count: n, Period: d} }

// PerSecond returns the rate of n events per second.
func PerSecond(n int64) Rate { return Rate{Count: n, Period: time.Second} }

// PerMinute returns the rate of n events per minute.
func PerMinute(n int64) Rate { return Rate{Count: n, Period: time.Minute} }

// PerHour returns the rate of n events per hour.
func PerHour(n int64) Rate { return Rate{Count: n, Period: time.Hour} }

// String formats r as sluice writes rates in configuration: "100/s", "10/m",
// "5/h", or "3/250ms" for other periods.
func (r Rate) String() string {
	n := strconv.FormatInt(r.Count, 10)
	switch r.Period {
	case time.Second:
		return n + "/s"
	case time.Minute:
		return n + "/m"
	case time.Hour:
		return n + "/h"
	}
	return n + "/" + FormatDuration(r.Period)
}

// Limit describes one limit: which algorithm and its parameters. It is a
// small comparable value; build it with the constructor named for the
// algorithm (FixedWindow, TokenBucket, ...), which sets exactly the fields
// that algorithm uses.
//
// Constructors do not return errors, so that limits can be written inline;
// Validate reports a limit whose parameters make no sense, naming the field,
// and every Store refuses such a limit with the same error.
//
// State is kept per (key, Limit): the same key used with two different limits
// holds two independent states, and changing a limit (for example on a
// configuration reload) starts its keys afresh.
type Limit struct {
	// Algorithm selects the arithmetic.
	Algorithm Algorithm
	// Count is the number of requests: per Period for the window and rate
	// algorithms, the number in flight for concurrency.
	Count int64
	// Period is the window length (fixed_window, sliding_log,
	// sliding_window) or the period of the rate Count/Period (token_bucket,
	// gcra, leaky_bucket, warm_up). Whole microseconds.
	Period time.Duration
	// Burst is the bucket capacity (token_bucket, gcra) or the number of
	// requests that may queue (leaky_bucket).
	Burst int64
	// NoDelay is, for leaky_bucket, how many queued requests are admitted
	// at once without a delay (nginx's delay=N; NoDelay == Burst is nginx's
	// nodelay).
	NoDelay int64
	// Warmup is, for warm_up, the time the rate takes to climb from a third
	// of Count/Period to Count/Period after the limit has been idle.
	Warmup time.Duration
	// LeaseTTL is, for concurrency, how long a lease lives when it is not
	// released, so that a holder that dies cannot leak capacity.
	LeaseTTL time.Duration
}

// FixedWindow allows n requests in each window of length window, with windows
// aligned to multiples of window since the Unix epoch (a 1m window resets at
// every whole minute, UTC).
//
// Guarantee: at most n in each aligned window. Across a window boundary up
// to 2n can pass within a time shorter than window (n at the end of one
// window, n at the start of the next); use SlidingLog or SlidingWindow where
// that burst matters. State: two integers.
func FixedWindow(n int64, window time.Duration) Limit {
	return Limit{Algorithm: AlgorithmFixedWindow, Count: n, Period: window}
}

// SlidingLog allows n requests in any window of length window: it records
// the time of every admitted request.
//
// Guarantee: never more than n admitted in any half-open interval
// [t, t+window). Exact, at the price of memory: 24 bytes per admitted request
// still inside the window (requests at the same microsecond share one
// record), so n is limited to 1,000,000; use SlidingWindow for large n.
func SlidingLog(n int64, window time.Duration) Limit {
	return Limit{Algorithm: AlgorithmSlidingLog, Count: n, Period: window}
}

// SlidingWindow allows about n requests per sliding window of length window
// using two counters: the count of the current aligned window plus the count
// of the previous one, weighted by how much of it the sliding window still
// covers (the estimate Cloudflare describes). The weight moves in steps of
// 1/65536 of the window and the weighted count is rounded up. The window is
// at most 24h.
//
// Guarantee: at most n per aligned window, and at most 2n in any interval
// of length window; for traffic spread evenly over the previous window the
// estimate is close to exact. State: three integers.
func SlidingWindow(n int64, window time.Duration) Limit {
	return Limit{Algorithm: AlgorithmSlidingWindow, Count: n, Period: window}
}

// TokenBucket allows bursts of up to burst requests and refills at rate: a
// bucket of burst tokens, one taken per unit of cost, refilled lazily with
// exact integer arithmetic (a refusal loses no accrued time). The bucket
// starts full.
//
// Guarantee: over any interval of length t, at most burst + rate·t
// admitted, and under saturating load exactly that many (rounded down).
func TokenBucket(rate Rate, burst int64) Limit {
	return Limit{Algorithm: AlgorithmTokenBucket, Count: rate.Count, Period: rate.Period, Burst: burst}
}

// GCRA is the generic cell rate algorithm, the leaky bucket as a meter: it
// admits exactly the requests TokenBucket admits (same rate, same burst) but
// keeps a single timestamp per key, the theoretical arrival time, instead of
// a level and a time.
func GCRA(rate Rate, burst int64) Limit {
	return Limit{Algorithm: AlgorithmGCRA, Count: rate.Count, Period: rate.Period, Burst: burst}
}

// LeakyBucket is the leaky bucket as a shaper, nginx's limit_req: requests
// leave at a constant rate. A request that arrives while others are queued is
// admitted with a Decision.Delay, the time it should wait so that admitted
// requests start one interval (Period/Count) apart; once queue requests are
// waiting, further ones are refused. Chain NoDelay to let the first requests
// of a burst through at once.
//
// Guarantee: admitted requests, started after their Delay, start at most one
// per interval beyond the NoDelay allowance; no admitted request waits longer
// than queue intervals.
func LeakyBucket(rate Rate, queue int64) Limit {
	return Limit{Algorithm: AlgorithmLeakyBucket, Count: rate.Count, Period: rate.Period, Burst: queue}
}

// WithNoDelay returns a copy of a leaky_bucket limit whose first n queued
// requests are admitted without delay (nginx's delay=n). n equal to the
// queue length is nginx's nodelay: the bucket then meters like GCRA with a
// burst of queue+1.
func (l Limit) WithNoDelay(n int64) Limit {
	l.NoDelay = n
	return l
}

// WarmUp is Guava's SmoothWarmingUp: after an idle period the limit admits
// slowly (one request per 3 intervals, a cold factor of 3) and speeds up
// linearly to rate over the warm-up period as requests are admitted, so that
// caches and connection pools behind the limit can warm. It starts cold.
// Requests are paced one at a time: a request is admitted when the previous
// one's pacing interval has passed, and its own cost delays the next one.
//
// Guarantee: never faster than rate; after warmup of continuous use, exactly
// rate. The warm-up period is at most one minute, and count × period (in
// µs) at most 2^53, so that the curve is computed exactly in integers.
func WarmUp(rate Rate, warmup time.Duration) Limit {
	return Limit{Algorithm: AlgorithmWarmUp, Count: rate.Count, Period: rate.Period, Warmup: warmup}
}

// Concurrency allows at most n requests in flight. An admitted request holds
// a lease (Decision.Lease) that must be given back with Limiter.Release when
// the work ends; a lease not released within ttl expires, so a holder that
// crashes cannot leak capacity.
//
// Guarantee: at most n unexpired, unreleased leases at any time.
func Concurrency(n int64, ttl time.Duration) Limit {
	return Limit{Algorithm: AlgorithmConcurrency, Count: n, LeaseTTL: ttl}
}

// String formats l for logs and status pages, for example
// "token_bucket(100/s, burst 20)" or "fixed_window(1000 per 1h)".
func (l Limit) String() string {
	name := l.Algorithm.String()
	rate := Rate{l.Count, l.Period}.String()
	n := strconv.FormatInt(l.Count, 10)
	switch l.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingLog, AlgorithmSlidingWindow:
		return name + "(" + n + " per " + FormatDuration(l.Period) + ")"
	case AlgorithmTokenBucket, AlgorithmGCRA:
		return name + "(" + rate + ", burst " + strconv.FormatInt(l.Burst, 10) + ")"
	case AlgorithmLeakyBucket:
		s := name + "(" + rate + ", queue " + strconv.FormatInt(l.Burst, 10)
		if l.NoDelay > 0 {
			s += ", nodelay " + strconv.FormatInt(l.NoDelay, 10)
		}
		return s + ")"
	case AlgorithmWarmUp:
		return name + "(" + rate + ", warm-up " + FormatDuration(l.Warmup) + ")"
	case AlgorithmConcurrency:
		return name + "(" + n + ", lease " + FormatDuration(l.LeaseTTL) + ")"
	}
	return fmt.Sprintf("%s(count %d, period %s, burst %d)", name, l.Count, FormatDuration(l.Period), l.Burst)
}

// Capacity is the largest cost a single request may have under l: Count for
// windows and concurrency, Burst for token_bucket and gcra, Burst+1 for
// leaky_bucket, and Count for warm_up (at most one period's worth of
// requests at once).
func (l Limit) Capacity() int64 {
	switch l.Algorithm {
	case AlgorithmTokenBucket, AlgorithmGCRA:
		return l.Burst
	case AlgorithmLeakyBucket:
		return l.Burst + 1
	}
	return l.Count
}

// Bounds that keep every quantity an exact integer below 2^53, so that the
// Lua port of each algorithm (whose numbers are doubles) agrees with Go.
const (
	maxExact         = 1 << 53
	maxPeriod        = 366 * 24 * time.Hour
	maxWarmup        = time.Minute
	maxLogCount      = 1_000_000
	maxConcurrency   = 1_000_000
	maxLeaseTTL      = 24 * time.Hour
	maxCountGeneral  = 1 << 36
	maxSlidingWindow = 24 * time.Hour
)

// Validate reports whether l is usable, and if not, which field is wrong and
// why. The error wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	name := l.Algorithm.String()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidLimit, name, fmt.Sprintf(format, args...))
	}
	if l.Algorithm == 0 || int(l.Algorithm) >= len(algorithmNames) {
		return fmt.Errorf("%w: algorithm is not set (use a constructor such as sluice.TokenBucket)", ErrInvalidLimit)
	}
	if l.Count < 1 {
		return bad("count must be at least 1 (got %d)", l.Count)
	}
	if l.Count > maxCountGeneral {
		return bad("count must be at most %d (got %d)", int64(maxCountGeneral), l.Count)
	}
	unused := func(field string, set bool) error {
		if set {
			return bad("%s is not used by %s and must be left zero", field, name)
		}
		return nil
	}
	checkPeriod := func(field string, d, max time.Duration) error {
		switch {
		case d <= 0:
			return bad("%s must be positive (got %s)", field, d)
		case d%time.Microsecond != 0:
			return bad("%s must be a whole number of microseconds (got %s)", field, d)
		case d > max:
			return bad("%s must be at most %s (got %s)", field, FormatDuration(max), FormatDuration(d))
		}
		return nil
	}
	var err error
	switch l.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingLog, AlgorithmSlidingWindow:
		max := maxPeriod
		if l.Algorithm == AlgorithmSlidingWindow {
			max = maxSlidingWindow
		}
		err = firstErr(checkPeriod("window", l.Period, max),
			unused("burst", l.Burst != 0), unused("nodelay", l.NoDelay != 0),
			unused("warmup", l.Warmup != 0), unused("lease_ttl", l.LeaseTTL != 0))
		if err == nil && l.Algorithm == AlgorithmSlidingLog && l.Count > maxLogCount {
			err = bad("count must be at most %d for sliding_log, which stores every request (got %d); use sliding_window", maxLogCount, l.Count)
		}
	case AlgorithmTokenBucket, AlgorithmGCRA, AlgorithmLeakyBucket:
		field := "burst"
		min := int64(1)
		if l.Algorithm == AlgorithmLeakyBucket {
			field, min = "queue", 0
		}
		err = firstErr(checkPeriod("period", l.Period, maxPeriod),
			unused("warmup", l.Warmup != 0), unused("lease_ttl", l.LeaseTTL != 0))
		if err == nil && l.Burst < min {
			err = bad("%s must be at least %d (got %d)", field, min, l.Burst)
		}
		if err == nil && l.Algorithm != AlgorithmLeakyBucket {
			err = unused("nodelay", l.NoDelay != 0)
		}
		if err == nil && (l.NoDelay < 0 || l.NoDelay > l.Burst) {
			err = bad("nodelay must be between 0 and the queue length %d (got %d)", l.Burst, l.NoDelay)
		}
		if err == nil {
			// One request is worth Period/gcd(Count, Period) units of
			// credit; the full bucket must stay an exact integer.
			us := int64(l.Period / time.Microsecond)
			units := us / gcd(l.Count, us)
			if c := l.Capacity(); c > maxExact/units {
				err = bad("%s %d at %s is too large to compute exactly (at most %d at this rate)", field, l.Burst, Rate{l.Count, l.Period}, maxExact/units-(c-l.Burst))
			}
		}
	case AlgorithmWarmUp:
		err = firstErr(checkPeriod("period", l.Period, maxPeriod), checkPeriod("warmup", l.Warmup, maxWarmup),
			unused("burst", l.Burst != 0), unused("nodelay", l.NoDelay != 0), unused("lease_ttl", l.LeaseTTL != 0))
		if us := int64(l.Period / time.Microsecond); err == nil && l.Count > maxExact/us {
			err = bad("count %d per %s is too large to compute exactly (at most %d per %s)", l.Count, FormatDuration(l.Period), maxExact/us, FormatDuration(l.Period))
		}
	case AlgorithmConcurrency:
		err = firstErr(checkPeriod("lease_ttl", l.LeaseTTL, maxLeaseTTL),
			unused("period", l.Period != 0), unused("burst", l.Burst != 0),
			unused("nodelay", l.NoDelay != 0), unused("warmup", l.Warmup != 0))
		if err == nil && l.Count > maxConcurrency {
			err = bad("count must be at most %d (got %d)", maxConcurrency, l.Count)
		}
	}
	return err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// FormatDuration formats d in the largest unit that divides it exactly:
// "1h", "90s", "1500ms", "250us". It is the form sluice accepts in
// configuration and prints in limits.
func FormatDuration(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}
	if d == 0 {
		return "0s"
	}
	for _, u := range units {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}
