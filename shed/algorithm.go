package shed

import (
	"math"
	"time"
)

// Sample is what a Limiter measured over one window: the requests that
// completed in it and the most that were in flight at once.
type Sample struct {
	// RTT is the mean latency of the requests that completed.
	RTT time.Duration
	// InFlight is the most requests in flight at once during the window.
	InFlight int
	// Dropped reports whether any request of the window was dropped
	// (Token.Drop: timed out or failed from overload).
	Dropped bool
	// Completed is how many requests completed in the window, and
	// Elapsed how long it lasted: the service's throughput.
	Completed int
	Elapsed   time.Duration
}

// Algorithm estimates a concurrency limit from measured latency. Update is
// a pure step of the estimate: given the current limit and one window's
// sample it returns the next limit (the Limiter clamps it to its
// MinLimit and MaxLimit). Implementations keep a little state (a baseline
// latency) and are not safe for concurrent use: a Limiter serialises its
// calls, and each Limiter needs an Algorithm of its own.
type Algorithm interface {
	// Name is the algorithm's name in stats and metrics ("gradient2").
	Name() string
	// Update returns the limit after sample, from limit.
	Update(limit float64, s Sample) float64
}

// Gradient2 is the gradient rule of Netflix's concurrency-limits: the
// limit follows the ratio of a long-term average latency to the latest
// one. Each update computes
//
//	gradient = clamp(Tolerance × long / rtt, 0.5, 1)
//	next     = limit × gradient + Queue
//	limit'   = limit × (1 − Smoothing) + next × Smoothing
//
// where long is an exponential average of the sampled latencies over
// LongWindow samples (a plain mean over the first ten). While latency stays
// within Tolerance times its long-term average the limit grows by Queue
// per update (smoothed); beyond it the limit shrinks in proportion, by at
// most half per update. A window with fewer than half the limit in flight
// leaves the limit as it is (the service is not the bottleneck), and when
// the long average exceeds twice the latest it decays by 5%, so the
// baseline recovers quickly after a long overload.
//
// The zero value is ready to use with the defaults below.
type Gradient2 struct {
	// Tolerance is how much latency may grow over its long-term average
	// before the limit shrinks. Default 1.5.
	Tolerance float64
	// Smoothing weighs each update against the current limit. Default 0.2.
	Smoothing float64
	// Queue is the headroom added per update. Default 4.
	Queue float64
	// LongWindow is the number of samples the long-term average spans.
	// Default 6000: ten minutes of the Limiter's default 100ms windows
	// (concurrency-limits averages 600 windows of a second). A shorter
	// one lets the baseline drift up during a long overload, and with it
	// the latency the limit accepts.
	LongWindow int

	long  float64 // the long-term average latency, ns
	count int     // samples in long
}

// Name returns "gradient2".
func (*Gradient2) Name() string { return "gradient2" }

const longWarmup = 10

// Update applies one sample (see the type's documentation).
func (g *Gradient2) Update(limit float64, s Sample) float64 {
	tol, smooth, queue := orDefault(g.Tolerance, 1.5), orDefault(g.Smoothing, 0.2), orDefault(g.Queue, 4)
	window := orDefault(g.LongWindow, 6000)
	rtt := float64(s.RTT)
	if rtt <= 0 {
		return limit
	}
	g.count++
	if g.count <= longWarmup {
		g.long += (rtt - g.long) / float64(g.count)
	} else {
		f := 2 / float64(window+1)
		g.long = g.long*(1-f) + rtt*f
	}
	if g.long/rtt > 2 {
		g.long *= 0.95
	}
	if float64(s.InFlight) < limit/2 {
		return limit
	}
	gradient := max(0.5, min(1, tol*g.long/rtt))
	next := limit*gradient + queue
	return limit*(1-smooth) + next*smooth
}

// Vegas is TCP Vegas's rule as Netflix's concurrency-limits applies it to
// requests: it estimates how many requests wait in a queue,
//
//	queue = ceil(limit × (1 − noLoad / rtt))
//
// where noLoad is the smallest latency sampled, and keeps that queue
// between Alpha and Beta: with log = max(1, floor(log10(limit))), a queue
// of at most log grows the limit by 6·log, one under 3·log grows it by
// log, one over 6·log shrinks it by log, and one in between keeps it. A
// window with a dropped request shrinks it by log; one with fewer than half
// the limit in flight keeps it. Every ProbeEvery × limit samples the
// baseline is taken afresh from the latest sample, so that a service that
// has become slower for good is not taken for a queue forever.
//
// The zero value is ready to use with the defaults below.
type Vegas struct {
	// Smoothing weighs each update against the current limit. Default 1
	// (no smoothing).
	Smoothing float64
	// ProbeEvery sets how often the baseline latency is measured again,
	// in samples per unit of limit. Default 30.
	ProbeEvery int

	noLoad float64 // ns; 0 until the first sample
	probes int
}

// Name returns "vegas".
func (*Vegas) Name() string { return "vegas" }

// Update applies one sample (see the type's documentation).
func (v *Vegas) Update(limit float64, s Sample) float64 {
	smooth := orDefault(v.Smoothing, 1)
	every := orDefault(v.ProbeEvery, 30)
	rtt := float64(s.RTT)
	if rtt <= 0 {
		return limit
	}
	v.probes++
	if float64(v.probes) >= float64(every)*limit {
		v.probes, v.noLoad = 0, rtt
		return limit
	}
	if v.noLoad == 0 || rtt < v.noLoad {
		v.noLoad = rtt
		return limit
	}
	log := max(1, math.Floor(math.Log10(limit)))
	next := limit
	switch queue := math.Ceil(limit * (1 - v.noLoad/rtt)); {
	case s.Dropped:
		next = limit - log
	case float64(s.InFlight) < limit/2:
		return limit
	case queue <= log:
		next = limit + 6*log
	case queue < 3*log:
		next = limit + log
	case queue > 6*log:
		next = limit - log
	default:
		return limit
	}
	next = max(1, next)
	return limit*(1-smooth) + next*smooth
}

// BBR is the rule of the adaptive protection of Sentinel and Kratos,
// after TCP BBR: the limit is the service's bandwidth-delay product, the
// most requests it completed per unit of time over the last Window
// samples times its smallest latency over the last RTTWindow samples:
//
//	limit = ceil(max(Completed / Elapsed) × min(RTT))
//
// At capacity that is the concurrency the service completes without a
// queue. The latency's window is the longer, as in TCP BBR, so that an
// overload does not soon become the baseline; one longer than it does.
// Under light load the product is the light load's own concurrency, so a
// burst above it is shed although the service could take it: use BBR with
// Config.CPUThreshold, as Sentinel and Kratos do, so that it sheds only
// while the CPU is busy.
//
// The zero value is ready to use with the defaults below.
type BBR struct {
	// Window is how many samples the maximum throughput spans. Default
	// 50 (5 s of the Limiter's default 100ms windows).
	Window int
	// RTTWindow is how many samples the minimum latency spans. Default
	// 600 (a minute).
	RTTWindow int

	rates ring[float64]       // completions per ns
	rtts  ring[time.Duration] // latencies
}

// Name returns "bbr".
func (*BBR) Name() string { return "bbr" }

// Update applies one sample (see the type's documentation).
func (b *BBR) Update(limit float64, s Sample) float64 {
	if s.RTT <= 0 || s.Elapsed <= 0 || s.Completed <= 0 {
		return limit
	}
	b.rates.add(float64(s.Completed)/float64(s.Elapsed), b.Window, 50)
	b.rtts.add(s.RTT, b.RTTWindow, 600)
	most, least := b.rates.items[0], b.rtts.items[0]
	for _, r := range b.rates.items {
		most = max(most, r)
	}
	for _, r := range b.rtts.items {
		least = min(least, r)
	}
	return max(1, math.Ceil(most*float64(least)))
}

// ring holds the last n values added.
type ring[T any] struct {
	items []T
	next  int
}

// add adds v to a ring of n values (def when n ≤ 0).
func (r *ring[T]) add(v T, n, def int) {
	if n <= 0 {
		n = def
	}
	if len(r.items) < n {
		r.items = append(r.items, v)
		return
	}
	r.items[r.next] = v
	r.next = (r.next + 1) % len(r.items)
}

// orDefault returns v, or def when v is not above zero (unset).
func orDefault[T int | float64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
