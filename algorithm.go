package sluice

import (
	"fmt"
	"strconv"
	"strings"
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

// periodKind says what Limit.Period means to an algorithm.
type periodKind uint8

const (
	noPeriod     periodKind = iota // unused
	windowPeriod                   // Count per window, written "window"
	ratePeriod                     // the rate Count/Period, written "period"
)

// burstKind says what Limit.Burst means to an algorithm, and so its
// capacity.
type burstKind uint8

const (
	noBurst     burstKind = iota // unused; the capacity is Count
	bucketBurst                  // a bucket of Burst tokens, written "burst"
	queueBurst                   // Burst requests may wait, written "queue"; capacity Burst+1
)

// algorithmSpec is what sluice knows about one algorithm: the parameters its
// Limit uses, their bounds, and from them its capacity, how it scales, what
// it advertises and the fields a configuration sets. Limit's methods read
// this table instead of switching on the algorithm, so a new algorithm is
// one new row.
type algorithmSpec struct {
	name      string
	period    periodKind
	maxPeriod time.Duration
	burst     burstKind
	noDelay   bool // uses NoDelay (at most Burst)
	warmup    bool // uses Warmup (at most maxWarmup)
	leaseTTL  bool // uses LeaseTTL (at most maxLeaseTTL)
	calendar  bool // may use Calendar and Zone instead of Period
	// pacedAdjust: an adjustment moves the time of the next admission by
	// the delta's time at the stable rate, so MaxAdjust bounds it to stay
	// exact (warm_up).
	pacedAdjust bool
	// maxCount bounds Count below maxCountGeneral; tooMany is the reason
	// given when Count exceeds it (%[1]d the bound, %[2]d the count).
	maxCount int64
	tooMany  string
}

const countTooLarge = "must be at most %[1]d (got %[2]d)"

var algorithms = [...]algorithmSpec{
	AlgorithmFixedWindow: {name: "fixed_window", period: windowPeriod, maxPeriod: maxPeriod, calendar: true,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmSlidingLog: {name: "sliding_log", period: windowPeriod, maxPeriod: maxPeriod,
		maxCount: maxLogCount, tooMany: "must be at most %[1]d for sliding_log, which stores every request (got %[2]d); use sliding_window"},
	AlgorithmSlidingWindow: {name: "sliding_window", period: windowPeriod, maxPeriod: maxSlidingWindow,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmTokenBucket: {name: "token_bucket", period: ratePeriod, maxPeriod: maxPeriod, burst: bucketBurst,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmGCRA: {name: "gcra", period: ratePeriod, maxPeriod: maxPeriod, burst: bucketBurst,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmLeakyBucket: {name: "leaky_bucket", period: ratePeriod, maxPeriod: maxPeriod, burst: queueBurst, noDelay: true,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmWarmUp: {name: "warm_up", period: ratePeriod, maxPeriod: maxPeriod, warmup: true, pacedAdjust: true,
		maxCount: maxCountGeneral, tooMany: countTooLarge},
	AlgorithmConcurrency: {name: "concurrency", leaseTTL: true,
		maxCount: maxConcurrency, tooMany: countTooLarge},
}

// Algorithms returns every algorithm sluice implements, in the order of
// their constants.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(algorithms)-1)
	for a := range algorithms {
		if Algorithm(a).known() {
			out = append(out, Algorithm(a))
		}
	}
	return out
}

func (a Algorithm) known() bool { return a != 0 && int(a) < len(algorithms) }

// spec returns a's row of the table, or nil for an unknown algorithm.
func (a Algorithm) spec() *algorithmSpec {
	if !a.known() {
		return nil
	}
	return &algorithms[a]
}

// String returns the configuration name of a, such as "sliding_window".
func (a Algorithm) String() string {
	if !a.known() {
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithms[a].name
}

// algorithmList is the names of every algorithm, for messages.
func algorithmList() string {
	names := make([]string, 0, len(algorithms))
	for _, a := range Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// ParseAlgorithm returns the Algorithm whose String form is name. An
// unknown name is a *LimitError (Field "algorithm") wrapping
// ErrInvalidLimit.
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, &LimitError{Field: "algorithm", Reason: fmt.Sprintf("%q is unknown (want one of %s)", name, algorithmList()), Err: ErrInvalidLimit}
}

// Fields returns the names a configuration file gives the parameters of
// a, as sluice's policy files write them: how the rate is written ("limit",
// "window" and "rate" for the window algorithms, whose rate may be written
// either way; "rate" for the rate algorithms; "limit" for concurrency),
// then the algorithm's own parameters ("burst", "queue", "nodelay",
// "warmup", "lease_ttl", and "calendar" and "timezone" for fixed_window). It returns nil for an unknown algorithm.
func (a Algorithm) Fields() []string {
	s := a.spec()
	if s == nil {
		return nil
	}
	var out []string
	switch s.period {
	case windowPeriod:
		out = append(out, "limit", "window", "rate")
	case ratePeriod:
		out = append(out, "rate")
	case noPeriod:
		out = append(out, "limit")
	}
	if s.burst != noBurst {
		out = append(out, s.burstName())
	}
	if s.noDelay {
		out = append(out, "nodelay")
	}
	if s.warmup {
		out = append(out, "warmup")
	}
	if s.leaseTTL {
		out = append(out, "lease_ttl")
	}
	if s.calendar {
		out = append(out, "calendar", "timezone")
	}
	return out
}

// periodName is what messages call Limit.Period.
func (s *algorithmSpec) periodName() string {
	if s.period == windowPeriod {
		return "window"
	}
	return "period"
}

// burstName is what messages call Limit.Burst.
func (s *algorithmSpec) burstName() string {
	if s.burst == queueBurst {
		return "queue"
	}
	return "burst"
}
