package failover_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// serveOptions are the go-redis settings sluice serve gives its client
// with the default 50 ms deadline (server/store.go).
func serveOptions() *redis.Options {
	o := clientOptions()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	return o
}

// call is one request of the stall tests, as its caller saw it, and how
// long a bare timer of the deadline, started as the request was, took to
// wake a goroutine waiting for it: what the machine's scheduling alone
// made of the deadline at that moment.
type call struct {
	start, end        time.Time
	witness           time.Duration
	allowed, degraded bool
	lay               *layers
}

// layers are when a request entered and left each store under failover
// (zero: it did not reach it), recorded by timedPrimary and timedFallback
// through the request's context, to show where a slow caller waited.
type layers struct {
	primaryIn, primaryOut, fallbackIn, fallbackOut time.Time
}

type layersKey struct{}

func layersOf(ctx context.Context) *layers {
	l, _ := ctx.Value(layersKey{}).(*layers)
	if l == nil {
		return &layers{} // a debt's charge: no caller to report to
	}
	return l
}

// timedPrimary is the Redis store, recording when each request entered and
// left it.
type timedPrimary struct{ *redisstore.Store }

func (p timedPrimary) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	l := layersOf(ctx)
	l.primaryIn = time.Now()
	defer func() { l.primaryOut = time.Now() }()
	return p.Store.Take(ctx, r)
}

// timedFallback is the fallback memstore, recording as timedPrimary does.
type timedFallback struct{ *memstore.Store }

func (f timedFallback) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	l := layersOf(ctx)
	l.fallbackIn = time.Now()
	defer func() { l.fallbackOut = time.Now() }()
	return f.Store.Take(ctx, r)
}

// String shows, from the request's start, when it entered and left each
// store and when its caller saw the decision.
func (c call) String() string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(c.start).Round(time.Millisecond).String()
	}
	l := c.lay
	return fmt.Sprintf("primary %s..%s, fallback %s..%s, returned %s, witness %s", at(l.primaryIn), at(l.primaryOut),
		at(l.fallbackIn), at(l.fallbackOut), at(c.end), c.witness.Round(time.Millisecond))
}

// openLoad sends rate requests a second to fn, each on its own goroutine
// (an open loop: a stalled store does not slow the arrivals), until stop,
// which waits for every request and returns them. Each request has a
// witness: a timer of deadline started with it, its wake-up recorded by a
// goroutine of its own. A request's outcome goes to one collector on a
// channel, not under a lock all requests share: handing such a lock on
// costs a pass of the scheduler's queue on a saturated machine, which the
// load would add to what it measures.
func openLoad(rate int, deadline time.Duration, fn func(context.Context) (sluice.Decision, error)) (stop func() []call) {
	var (
		all       []call
		wg        sync.WaitGroup
		done      = make(chan struct{})
		out       = make(chan call, rate)
		collected = make(chan struct{})
	)
	go func() {
		for c := range out {
			all = append(all, c)
		}
		close(collected)
	}()
	wg.Go(func() {
		t0, sent := time.Now(), 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for due := int(time.Since(t0).Seconds() * float64(rate)); sent < due; sent++ {
				wg.Go(func() {
					c := call{start: time.Now(), lay: &layers{}}
					woke := make(chan time.Time, 1)
					witness := time.NewTimer(deadline)
					go func() { <-witness.C; woke <- time.Now() }()
					d, err := fn(context.WithValue(context.Background(), layersKey{}, c.lay))
					c.end, c.allowed, c.degraded = time.Now(), err == nil && d.Allowed, d.Degraded
					c.witness = (<-woke).Sub(c.start)
					out <- c
				})
			}
		}
	})
	return sync.OnceValue(func() []call {
		close(done)
		wg.Wait()
		close(out)
		<-collected
		return all
	})
}

// stallResult is what a stall run measured.
type stallResult struct {
	calls, admitted         int
	bound                   float64 // the limit's bound over the run
	degraded, degradedAdmit int
	fallbackBound           float64 // the fallback's bound over the degraded span
	span                    time.Duration
	slowest, p99, noise     time.Duration
	// witness is how long the slowest witness took (see call): the
	// deadline and the most the machine delayed a goroutine waking at a
	// deadline during the run; own, the slowest caller's own witness.
	witness, own time.Duration
	opens        int64
	slowestCall  call
	// most is, per stretch of a call (see stretches), the longest any
	// call spent in it.
	most [5]time.Duration
}

// stretches splits a call's time: before it reached the primary, in the
// primary, from there to the fallback, in the fallback, and from the last
// store it left until its caller had the decision.
func (c call) stretches() (s [5]time.Duration) {
	l, mark := c.lay, c.start
	for i, t := range []time.Time{l.primaryIn, l.primaryOut, l.fallbackIn, l.fallbackOut, c.end} {
		if !t.IsZero() {
			s[i], mark = t.Sub(mark), t
		}
	}
	return s
}

func (r stallResult) String() string {
	return fmt.Sprintf("%d calls, %d admitted (bound %.0f, %+.1f%%); degraded %d over %v, %d admitted (fallback bound %.0f); latency p99 %v, slowest %v (its own witness %v, the slowest witness %v; timers late by up to %v); breaker opened %d times; the slowest: %v; the longest stretches: before the primary %v, in it %v, to the fallback %v, in it %v, after %v",
		r.calls, r.admitted, r.bound, 100*(float64(r.admitted)/r.bound-1), r.degraded, r.span.Round(time.Millisecond), r.degradedAdmit, r.fallbackBound,
		r.p99.Round(time.Millisecond), r.slowest.Round(time.Millisecond), r.own.Round(time.Millisecond), r.witness.Round(time.Millisecond),
		r.noise.Round(time.Millisecond), r.opens, r.slowestCall,
		r.most[0].Round(time.Millisecond), r.most[1].Round(time.Millisecond), r.most[2].Round(time.Millisecond), r.most[3].Round(time.Millisecond), r.most[4].Round(time.Millisecond))
}

// stallChaos runs instances failover stores with their defaults (but
// FallbackScale) on one real Redis, under rate requests a second in all,
// for total; at stallAt it freezes Redis (SIGSTOP) for stall. The limit is
// a token bucket of 200/s and burst 200.
func stallChaos(t *testing.T, instances, rate int, scale float64, stallAt, stall, total time.Duration) stallResult {
	p := redistest.StartProcess(t)
	prefix := redistest.Prefix(t)
	lim := sluice.TokenBucket(sluice.PerSecond(200), 200)
	var stores []*failover.Store
	var stops []func() []call
	for range instances {
		rs, err := redisstore.New(p.Client(serveOptions()), redisstore.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		s := newStore(t, timedPrimary{rs}, failover.Config{FallbackScale: scale, FallbackStore: timedFallback{ms}, Logger: slog.New(slog.DiscardHandler)})
		stores = append(stores, s)
	}
	late := redistest.Lateness(50, 50*time.Millisecond)
	for _, s := range stores {
		limiter := sluice.New(s)
		stops = append(stops, openLoad(rate/instances, 50*time.Millisecond, func(ctx context.Context) (sluice.Decision, error) {
			return limiter.Allow(ctx, "stall", lim)
		}))
	}
	time.Sleep(stallAt)
	p.Freeze()
	time.Sleep(stall)
	p.Thaw()
	time.Sleep(total - stallAt - stall)
	var all []call
	for _, stop := range stops {
		all = append(all, stop()...)
	}
	var r stallResult
	r.noise = late()
	var first, last, dfirst, dlast time.Time
	var took []time.Duration
	for _, c := range all {
		if first.IsZero() || c.start.Before(first) {
			first = c.start
		}
		last = maxTime(last, c.end)
		d := c.end.Sub(c.start)
		took = append(took, d)
		if d > r.slowest {
			r.slowest, r.own, r.slowestCall = d, c.witness, c
		}
		r.witness = max(r.witness, c.witness)
		for i, d := range c.stretches() {
			r.most[i] = max(r.most[i], d)
		}
		if c.allowed {
			r.admitted++
		}
		if c.degraded {
			r.degraded++
			if dfirst.IsZero() || c.start.Before(dfirst) {
				dfirst = c.start
			}
			dlast = maxTime(dlast, c.end)
			if c.allowed {
				r.degradedAdmit++
			}
		}
	}
	r.calls = len(all)
	r.bound = 200 + 200*last.Sub(first).Seconds()
	r.span = dlast.Sub(dfirst)
	// Each instance's fallback: a bucket of 200×scale a second and as
	// much burst, from empty counts at worst.
	r.fallbackBound = float64(instances) * scale * (200 + 200*r.span.Seconds())
	slices.Sort(took)
	r.p99 = took[len(took)*99/100]
	for _, s := range stores {
		r.opens += s.Stats().Opens
	}
	return r
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestChaosStall: three instances on one Redis under 2,000 requests a
// second, with failover's defaults (a 50 ms deadline, 5 failures, the
// fallback mode) and FallbackScale 1/3, which sluice serve's count of the
// instances sets by default; Redis freezes (SIGSTOP) for 100 ms,
// then for a second. What the instances admit stays within the limit's
// bound plus 5%, what the fallback admits within its bound, and every
// caller returns within the deadline plus 20 ms, plus twice the most the
// machine delayed a bare timer of the deadline started with a request
// (the witnesses, see call): the machine is shared, and a caller whose
// deadline passed needs up to two wake-ups to return (its timer's, then a
// lock or channel on the way out), each of which the machine may delay as
// much as it delayed a witness.
func TestChaosStall(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos test of several seconds")
	}
	noLeaks(t, redialer)
	for _, stall := range []time.Duration{100 * time.Millisecond, time.Second} {
		t.Run(stall.String(), func(t *testing.T) {
			r := stallChaos(t, 3, 2000, 1.0/3, 1500*time.Millisecond, stall, 4*time.Second)
			t.Log(r)
			if r.degraded == 0 {
				t.Fatal("no request was decided by the fallback: the stall was not exercised")
			}
			if float64(r.admitted) > 1.05*r.bound {
				t.Errorf("admitted %d, more than the bound %.0f plus 5%%", r.admitted, r.bound)
			}
			if float64(r.degradedAdmit) > r.fallbackBound {
				t.Errorf("the fallback admitted %d, more than its bound %.0f", r.degradedAdmit, r.fallbackBound)
			}
			// A short stall opens no breaker, unless the machine itself
			// made a bare timer of the deadline a deadline late: then a
			// healthy Redis's answers miss the deadline too, and those
			// failures open it as they should.
			if stall < 200*time.Millisecond && r.opens != 0 && r.witness < 100*time.Millisecond {
				t.Errorf("a %v stall opened the breaker %d times", stall, r.opens)
			}
			if bound := 70*time.Millisecond + 2*(r.witness-50*time.Millisecond); r.slowest > bound {
				t.Errorf("a caller waited %v, more than the deadline, 20 ms and twice the most a bare timer of the deadline was late (%v)", r.slowest, bound)
			}
		})
	}
}
