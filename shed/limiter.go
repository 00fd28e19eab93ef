package shed

import (
	"context"
	"math"
	"sync"
	"time"
)

// Limiter is an adaptive limit on requests in flight. Call Acquire before
// the work and Done (or Drop, or Ignore) on its Token after it. It is safe
// for concurrent use; every call takes one mutex briefly, and Acquire
// allocates only when a critical request waits.
type Limiter struct {
	cfg Config

	mu       sync.Mutex
	estimate float64 // the algorithm's limit, unclamped to an integer
	limit    int
	inflight int
	waiting  []*waiter // critical requests waiting for a slot, oldest first
	win      window
	noLoad   time.Duration // the smallest sample RTT
	lastRTT  time.Duration
	counts   [nPriorities]classCounts
	gate     *cpuGate // nil without Config.CPUThreshold
}

type window struct {
	start   time.Time
	n       int
	sum     time.Duration
	most    int
	dropped bool
}

type classCounts struct {
	admitted, waited, shed uint64
}

// waiter is a critical request waiting for a slot; granted is set, under
// the Limiter's mutex, when a slot is handed to it.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// New returns a Limiter for cfg.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, estimate: float64(cfg.InitialLimit), limit: cfg.InitialLimit}
	l.win.start = cfg.Now()
	if cfg.CPUThreshold > 0 {
		l.gate = &cpuGate{read: cfg.CPU, usage: -1}
	}
	return l, nil
}

// Token is an admitted request's slot. Exactly one of Done, Drop or Ignore
// must be called once the work ends.
type Token struct {
	l     *Limiter
	start time.Time
}

// Acquire admits a request of priority p, or refuses it with ErrShed. A
// critical request may wait (Config.CriticalWait) for a slot; it returns
// ctx's error if ctx ends first.
func (l *Limiter) Acquire(ctx context.Context, p Priority) (Token, error) {
	if p >= nPriorities {
		p = Default
	}
	l.mu.Lock()
	if l.inflight < l.capacity(p) && (p == Critical || len(l.waiting) == 0) || !l.cpuBusy() {
		l.inflight++
		l.win.most = max(l.win.most, l.inflight)
		l.counts[p].admitted++
		l.mu.Unlock()
		return Token{l: l, start: l.cfg.Now()}, nil
	}
	wait := l.criticalWait()
	if p != Critical || wait <= 0 || len(l.waiting) >= l.limit {
		l.counts[p].shed++
		if l.gate != nil {
			l.gate.lastShed = l.cfg.Now()
		}
		l.mu.Unlock()
		return Token{}, ErrShed
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiting = append(l.waiting, w)
	l.mu.Unlock()
	return l.await(ctx, w, wait)
}

// cpuBusy reports whether the CPU gate lets shedding happen: always
// without one. l.mu is held.
func (l *Limiter) cpuBusy() bool {
	return l.gate == nil || l.gate.busy(l.cfg.Now(), l.cfg.CPUThreshold)
}

// capacity is how many may be in flight when a request of p is admitted.
func (l *Limiter) capacity(p Priority) int {
	if p == Sheddable {
		return int(math.Ceil(float64(l.limit) * l.cfg.SheddableShare))
	}
	return l.limit
}

func (l *Limiter) criticalWait() time.Duration {
	if l.cfg.CriticalWait != 0 {
		return l.cfg.CriticalWait
	}
	return l.noLoad
}

// await waits for w to be granted a slot, for at most wait.
func (l *Limiter) await(ctx context.Context, w *waiter, wait time.Duration) (Token, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
	case <-t.C:
		err = ErrShed
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted { // granted as the wait ended: the slot is ours
		l.counts[Critical].admitted++
		l.counts[Critical].waited++
		return Token{l: l, start: l.cfg.Now()}, nil
	}
	for i, o := range l.waiting {
		if o == w {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			break
		}
	}
	l.counts[Critical].shed++
	return Token{}, err
}

// Done ends an admitted request that completed: its latency is a sample.
func (t Token) Done() { t.end(true, false) }

// Drop ends an admitted request that timed out or failed from overload: a
// sign to shrink the limit (Vegas; Gradient2 reads only latency).
func (t Token) Drop() { t.end(true, true) }

// Ignore ends an admitted request whose latency says nothing about load
// (the client went away, a stream ended).
func (t Token) Ignore() { t.end(false, false) }

func (t Token) end(sample, dropped bool) {
	l := t.l
	if l == nil {
		return
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if sample {
		l.win.n++
		l.win.sum += now.Sub(t.start)
		l.win.dropped = l.win.dropped || dropped
		if l.win.n >= l.cfg.MinSamples && now.Sub(l.win.start) >= l.cfg.Window {
			l.update(now)
		}
	}
	if len(l.waiting) > 0 && l.inflight <= l.limit {
		l.grant() // the slot passes straight to the oldest critical waiter
		return
	}
	l.inflight--
}

// update feeds the window's sample to the algorithm and starts a new
// window; l.mu is held.
func (l *Limiter) update(now time.Time) {
	s := Sample{
		RTT: l.win.sum / time.Duration(l.win.n), InFlight: l.win.most, Dropped: l.win.dropped,
		Completed: l.win.n, Elapsed: now.Sub(l.win.start),
	}
	l.lastRTT = s.RTT
	if l.noLoad == 0 || s.RTT < l.noLoad {
		l.noLoad = s.RTT
	}
	est := l.cfg.Algorithm.Update(l.estimate, s)
	if math.IsNaN(est) || math.IsInf(est, 0) {
		est = l.estimate
	}
	l.estimate = min(max(est, float64(l.cfg.MinLimit)), float64(l.cfg.MaxLimit))
	l.limit = int(l.estimate)
	l.win = window{start: now, most: l.inflight}
	for len(l.waiting) > 0 && l.inflight < l.limit {
		l.inflight++
		l.grant()
	}
}

// grant hands a slot to the oldest waiter; l.mu is held.
func (l *Limiter) grant() {
	w := l.waiting[0]
	l.waiting[0] = nil
	l.waiting = l.waiting[1:]
	w.granted = true
	close(w.ready)
}

// Stats is a Limiter's state and counters.
type Stats struct {
	// Algorithm names the algorithm ("gradient2").
	Algorithm string `json:"algorithm"`
	// Limit is how many requests may be in flight; Estimate is the
	// algorithm's estimate it is the integer part of.
	Limit    int     `json:"limit"`
	Estimate float64 `json:"estimate"`
	// InFlight is how many requests are in flight; Waiting how many
	// critical ones wait for a slot.
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting"`
	// RTT is the mean latency of the last sample; NoLoad the smallest
	// sampled, the latency of the service without load.
	RTT    time.Duration `json:"rtt_ns"`
	NoLoad time.Duration `json:"no_load_rtt_ns"`
	// CPU is the CPU usage the gate last measured (Config.CPUThreshold),
	// a share of the CPUs the process may use; -1 without a gate, before
	// the first measurement, or where usage cannot be read.
	CPU float64 `json:"cpu"`
	// Classes counts requests by priority, in the order of Priorities.
	Classes [nPriorities]ClassStats `json:"classes"`
}

// ClassStats counts the requests of one priority since the Limiter began.
type ClassStats struct {
	Priority string `json:"priority"`
	// Admitted requests, Waited of them after waiting for a slot.
	Admitted uint64 `json:"admitted"`
	Waited   uint64 `json:"waited"`
	// Shed requests were refused.
	Shed uint64 `json:"shed"`
}

// Stats returns the Limiter's state now.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		Algorithm: l.cfg.Algorithm.Name(), Limit: l.limit, Estimate: l.estimate, InFlight: l.inflight,
		Waiting: len(l.waiting), RTT: l.lastRTT, NoLoad: l.noLoad, CPU: -1,
	}
	if l.gate != nil {
		s.CPU = l.gate.usage
	}
	for i, p := range Priorities {
		c := l.counts[p]
		s.Classes[i] = ClassStats{Priority: p.String(), Admitted: c.admitted, Waited: c.waited, Shed: c.shed}
	}
	return s
}

// RetryAfter is what refusals tell clients to wait (Config.RetryAfter).
func (l *Limiter) RetryAfter() time.Duration { return l.cfg.RetryAfter }
