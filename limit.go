package sluice

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

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
// State is kept per key, algorithm and Version: a limit whose other
// parameters change (a reload raising a quota, an override, a new policy)
// keeps the key's usage, carried over by the first decision under the new
// parameters, on every store, as follows:
//
//   - fixed_window: the count of the window still running is kept and
//     counts in the new window holding now (a changed window length or
//     calendar period included); a window that has ended is forgotten.
//   - sliding_window: the same for the current window's count; the
//     previous window's count is dropped when the window length changes,
//     kept when only the count does.
//   - sliding_log, concurrency: the log and the leases are kept as they
//     are, judged under the new count and window (leases keep their
//     expiry).
//   - token_bucket, gcra, leaky_bucket: the number of requests the bucket
//     holds (tokens used, or the queue) is kept, rounded up to a whole
//     request, and capped at the new capacity: the bucket never has more
//     room than the new burst, and refills at the new rate from then on.
//   - warm_up: the warmth is kept, capped at the new warm-up period.
//
// Instances on one Redis with the old and the new limit (a rollout) read
// and carry over the same state, each under its own limit. To start afresh
// on purpose, change Version. Two limits with the same algorithm and
// Version on one key share its state, so Check refuses them together
// (ErrDuplicateRequest).
type Limit struct {
	// Algorithm selects the arithmetic.
	Algorithm Algorithm
	// Calendar, for fixed_window, aligns the window to a calendar period
	// of Zone instead of a Period since the epoch (see CalendarWindow);
	// Period is then zero.
	Calendar Calendar
	// Version is part of the identity of a key's state: a limit with
	// another Version starts every key afresh, where changing any other
	// parameter carries the state over (see above). Zero by default.
	Version uint32
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
	// Zone is the IANA time zone name of a Calendar window ("" is UTC).
	Zone string
}

// Shares reports whether l and m keep one state for a key: they have the
// same Algorithm and Version. A store carries the state over from one to
// the other (see Limit).
func (l Limit) Shares(m Limit) bool {
	return l.Algorithm == m.Algorithm && l.Version == m.Version
}

// WithVersion returns a copy of l with Version v: a limit whose keys start
// afresh, sharing no state with those of other versions.
func (l Limit) WithVersion(v uint32) Limit {
	l.Version = v
	return l
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
	s := l.Algorithm.spec()
	if s == nil {
		return fmt.Sprintf("%s(count %d, period %s, burst %d)", l.Algorithm, l.Count, FormatDuration(l.Period), l.Burst)
	}
	b := []byte(s.name + "(")
	switch {
	case l.Calendar != 0:
		b = fmt.Appendf(b, "%d per %s", l.Count, l.Calendar)
		if l.Zone != "" {
			b = append(b, " in "+l.Zone...)
		}
	case s.period == windowPeriod:
		b = fmt.Appendf(b, "%d per %s", l.Count, FormatDuration(l.Period))
	case s.period == ratePeriod:
		b = append(b, Rate{l.Count, l.Period}.String()...)
	default:
		b = strconv.AppendInt(b, l.Count, 10)
	}
	if s.burst != noBurst {
		b = fmt.Appendf(b, ", %s %d", s.burstName(), l.Burst)
	}
	if s.noDelay && l.NoDelay > 0 {
		b = fmt.Appendf(b, ", nodelay %d", l.NoDelay)
	}
	if s.warmup {
		b = append(b, ", warm-up "+FormatDuration(l.Warmup)...)
	}
	if s.leaseTTL {
		b = append(b, ", lease "+FormatDuration(l.LeaseTTL)...)
	}
	if l.Version != 0 {
		b = fmt.Appendf(b, ", version %d", l.Version)
	}
	return string(append(b, ')'))
}

// Capacity is the largest cost a single request may have under l: Count for
// windows and concurrency, Burst for token_bucket and gcra, Burst+1 for
// leaky_bucket, and Count for warm_up (at most one period's worth of
// requests at once).
func (l Limit) Capacity() int64 {
	s := l.Algorithm.spec()
	if s == nil {
		return l.Count
	}
	switch s.burst {
	case bucketBurst:
		return l.Burst
	case queueBurst:
		return l.Burst + 1
	case noBurst:
	}
	return l.Count
}

// Quota returns what l advertises in RateLimit-Policy header fields: the
// quota, its Capacity, and the window in which that much is restored: the
// window of the window algorithms, Period for warm_up, Capacity ×
// Period/Count for the buckets (the time the rate takes to refill them),
// 0 for concurrency, which restores nothing by time, and the nominal
// length of a calendar window's period (24h, 7d, 30d, 365d: a particular
// month may be shorter or longer). l must be valid.
func (l Limit) Quota() (quota int64, window time.Duration) {
	s := l.Algorithm.spec()
	quota = l.Capacity()
	switch {
	case s == nil || l.Count <= 0:
		return quota, 0
	case l.Calendar != 0:
		return quota, l.Calendar.nominal()
	case s.burst != noBurst:
		// Exact in integers: Validate keeps Capacity × us/g below 2^53.
		us := int64(l.Period / time.Microsecond)
		g := gcd(l.Count, us)
		return quota, time.Duration(quota*(us/g)/(l.Count/g)) * time.Microsecond
	case s.period != noPeriod:
		return quota, l.Period
	}
	return quota, 0
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
// why: the error is a *LimitError wrapping ErrInvalidLimit.
func (l Limit) Validate() error {
	s := l.Algorithm.spec()
	if s == nil {
		return &LimitError{Field: "algorithm", Reason: "is not set (use a constructor such as sluice.TokenBucket)", Err: ErrInvalidLimit}
	}
	v := validator{l: l}
	switch {
	case l.Count < 1:
		v.fail("count", "must be at least 1 (got %d)", l.Count)
	case l.Count > maxCountGeneral:
		v.fail("count", "must be at most %d (got %d)", int64(maxCountGeneral), l.Count)
	}
	if l.Calendar != 0 || l.Zone != "" {
		v.calendar(s)
	} else {
		v.duration(s.period != noPeriod, s.periodName(), l.Period, s.maxPeriod)
	}
	v.duration(s.warmup, "warmup", l.Warmup, maxWarmup)
	v.duration(s.leaseTTL, "lease_ttl", l.LeaseTTL, maxLeaseTTL)
	if s.burst == noBurst {
		v.unused("burst", l.Burst != 0)
	} else if min := s.minBurst(); l.Burst < min {
		v.fail(s.burstName(), "must be at least %d (got %d)", min, l.Burst)
	}
	if !s.noDelay {
		v.unused("nodelay", l.NoDelay != 0)
	} else if l.NoDelay < 0 || l.NoDelay > l.Burst {
		v.fail("nodelay", "must be between 0 and the queue length %d (got %d)", l.Burst, l.NoDelay)
	}
	if l.Count > s.maxCount {
		v.fail("count", s.tooMany, s.maxCount, l.Count)
	}
	if v.err == nil {
		v.exact(s)
	}
	return v.err
}

// minBurst is the least Burst an algorithm that uses it accepts: a bucket
// holds at least one token, a queue may be empty.
func (s *algorithmSpec) minBurst() int64 {
	if s.burst == queueBurst {
		return 0
	}
	return 1
}

// validator keeps the first error Validate finds.
type validator struct {
	l   Limit
	err error
}

func (v *validator) fail(field, format string, args ...any) {
	if v.err == nil {
		v.err = &LimitError{Algorithm: v.l.Algorithm, Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidLimit}
	}
}

func (v *validator) unused(field string, set bool) {
	if set {
		v.fail(field, "is not used by %s and must be left zero", v.l.Algorithm)
	}
}

// duration checks a duration the algorithm uses, or that one it does not
// use is zero.
func (v *validator) duration(used bool, field string, d, max time.Duration) {
	switch {
	case !used:
		v.unused(field, d != 0)
	case d <= 0:
		v.fail(field, "must be positive (got %s)", d)
	case d%time.Microsecond != 0:
		v.fail(field, "must be a whole number of microseconds (got %s)", d)
	case d > max:
		v.fail(field, "must be at most %s (got %s)", FormatDuration(max), FormatDuration(d))
	}
}

// calendar checks a calendar window: fixed_window only, a known period
// and zone, and no Period.
func (v *validator) calendar(s *algorithmSpec) {
	l := v.l
	switch {
	case !s.calendar:
		v.fail("calendar", "is not used by %s (only fixed_window has calendar periods)", l.Algorithm)
	case l.Calendar == 0:
		v.fail("timezone", "is set (%q) but no calendar period is", l.Zone)
	case l.Calendar > Year:
		v.fail("calendar", "must be day, week, month or year (got %d)", uint8(l.Calendar))
	case l.Period != 0:
		v.fail("window", "must be left zero in a calendar window (got %s): the calendar period is the window", FormatDuration(l.Period))
	}
	if v.err == nil {
		if _, err := LoadZone(l.Zone); err != nil {
			v.fail("timezone", "%v", err)
		}
	}
}

// exact checks that the algorithm's arithmetic stays in exact integers.
func (v *validator) exact(s *algorithmSpec) {
	l := v.l
	us := int64(l.Period / time.Microsecond)
	if s.burst != noBurst {
		// One request is worth Period/gcd(Count, Period) units of credit;
		// the full bucket must stay an exact integer.
		units := us / gcd(l.Count, us)
		if c := l.Capacity(); c > maxExact/units {
			v.fail(s.burstName(), "%d at %s is too large to compute exactly (at most %d at this rate)", l.Burst, Rate{l.Count, l.Period}, maxExact/units-(c-l.Burst))
		}
	}
	if s.warmup && l.Count > maxExact/us {
		v.fail("count", "%d per %s is too large to compute exactly (at most %d per %s)", l.Count, FormatDuration(l.Period), maxExact/us, FormatDuration(l.Period))
	}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// maxScale bounds the factor Scale accepts.
const maxScale = 1e6

// Scale returns l with its quantities multiplied by f: Count, and Burst
// (the bucket or the queue) and NoDelay where the algorithm uses them.
// Periods, Warmup and LeaseTTL are kept. The rule, the one every scaled
// limit in sluice follows (policy overrides, failover's fallback): each
// product is rounded to the nearest integer, halves away from zero, then
// raised to its least value (1 for Count and a bucket, 0 for a queue and
// NoDelay); NoDelay stays at most the queue, so nginx's nodelay stays
// nodelay. Scale(1) returns l.
//
// f must be above 0 and at most 1e6. The error is a *LimitError wrapping
// ErrInvalidLimit: l's own, one for f (Field "scale"), or the scaled
// limit's (a count scaled past what the algorithm can compute exactly).
func (l Limit) Scale(f float64) (Limit, error) {
	if err := l.Validate(); err != nil {
		return l, err
	}
	if !(f > 0 && f <= maxScale) { // also refuses NaN
		return l, &LimitError{Algorithm: l.Algorithm, Field: "scale", Reason: fmt.Sprintf("must be above 0 and at most %g (got %g)", float64(maxScale), f), Err: ErrInvalidLimit}
	}
	if f == 1 {
		return l, nil
	}
	s := l.Algorithm.spec()
	mul := func(n, least int64) int64 {
		v := math.Round(float64(n) * f)
		if v >= maxExact { // past every bound Validate allows; keeps the conversion defined
			return maxExact
		}
		return max(least, int64(v))
	}
	out := l
	out.Count = mul(l.Count, 1)
	if s.burst != noBurst {
		out.Burst = mul(l.Burst, s.minBurst())
	}
	if s.noDelay {
		out.NoDelay = min(mul(l.NoDelay, 0), out.Burst)
	}
	if err := out.Validate(); err != nil {
		return l, err
	}
	return out, nil
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
