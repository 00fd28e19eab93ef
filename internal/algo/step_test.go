package algo

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// t0 is the start of every fixed timeline: a time aligned to whole minutes,
// as a real clock reading (µs since the Unix epoch) would be.
const t0 = 1_700_000_040 * 1_000_000

const (
	us = time.Microsecond
	ms = time.Millisecond
	s  = time.Second
)

// tick is one request on a fixed timeline and the decision it must get.
// Fields of want left zero are checked as zero.
type tick struct {
	at   time.Duration // since t0
	cost int64
	want sluice.Decision
}

// yes and no build expected decisions compactly.
func yes(remaining int64, reset time.Duration) sluice.Decision {
	return sluice.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func no(remaining int64, retry, reset time.Duration) sluice.Decision {
	return sluice.Decision{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func compile(t *testing.T, l sluice.Limit) Params {
	t.Helper()
	p, err := Compile(l)
	if err != nil {
		t.Fatalf("Compile(%s): %v", l, err)
	}
	return p
}

// runSteps plays steps against a fresh state and checks every decision. The
// Limit field of each expected decision is filled in from the limit.
func runSteps(t *testing.T, l sluice.Limit, steps []tick) {
	t.Helper()
	p := compile(t, l)
	var st State
	for i, sp := range steps {
		if err := p.CheckCost(sp.cost, l); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := Step(&p, &st, t0+int64(sp.at/us), sp.cost, NoMaxDelay, 0, true)
		want := sp.want
		if want.Limit == 0 {
			want.Limit = p.Cap
		}
		if got != want {
			t.Errorf("%s step %d (t=%s cost %d):\n got %+v\nwant %+v", l, i, sp.at, sp.cost, got, want)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	runSteps(t, sluice.FixedWindow(3, s), []tick{
		{0, 1, yes(2, s)},
		{0, 1, yes(1, s)},
		{500 * ms, 1, yes(0, 500*ms)},
		{500 * ms, 1, no(0, 500*ms, 500*ms)},
		{s - us, 1, no(0, us, us)},
		{s, 0, sluice.Decision{Allowed: true, Remaining: 3}}, // boundary: a fresh window; peek
		{s, 1, yes(2, s)},
		{s, 3, no(2, s, s)}, // more than remains, less than capacity: next window
		{s, 2, yes(0, s)},
		{999 * ms, 1, no(0, 1001*ms, 1001*ms)}, // clock back: still the newest window
		{2 * s, 3, yes(0, s)},
		{2 * s, 0, no(0, s, s)}, // peek at an exhausted window
	})
}

// TestFixedWindowBoundaryBurst documents the fixed window's known weakness:
// 2N admitted within a time much shorter than the window.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	p := compile(t, sluice.FixedWindow(100, time.Minute))
	var st State
	admitted := 0
	for _, at := range []int64{t0 + 59_999_000, t0 + 60_000_000} { // 1 ms apart
		for range 100 {
			if Step(&p, &st, at, 1, NoMaxDelay, 0, true).Allowed {
				admitted++
			}
		}
	}
	if admitted != 200 {
		t.Fatalf("admitted %d across the boundary, want 200 (2N)", admitted)
	}
}

func TestSlidingLog(t *testing.T) {
	runSteps(t, sluice.SlidingLog(3, s), []tick{
		{0, 1, yes(2, s)},
		{100 * ms, 1, yes(1, s)}, // ResetAfter counts from now: the newest record leaves at 1.1s
		{200 * ms, 1, yes(0, s)},
		{300 * ms, 1, no(0, 700*ms, 900*ms)},
		{s - us, 1, no(0, us, 200*ms+us)},
		{s, 1, yes(0, s)}, // the record at 0 left the window [1s-1s, 1s] exactly now
		{s, 2, no(0, 200*ms, s)},
		{500 * ms, 1, no(0, 600*ms, 1500*ms)}, // clock back: time stands still at 1s
		{1100 * ms, 1, yes(0, s)},
		{1100 * ms, 1, no(0, 100*ms, s)},
		{1100 * ms, 0, no(0, 100*ms, s)},
	})
}

func TestSlidingWindow(t *testing.T) {
	steps := []tick{}
	for i := range 10 {
		steps = append(steps, tick{0, 1, yes(int64(9-i), 2*s)})
	}
	steps = append(steps,
		// Next window opens at 1s with prev=10; the weight of prev falls
		// to 9/10 at 1.1s, leaving room for one.
		tick{500 * ms, 1, no(0, 599991*us, 1500*ms)}, // weights move in steps of 1/65536 window
		tick{1100 * ms, 1, yes(0, 1900*ms)},
		tick{1100 * ms, 1, no(0, 99997*us, 1900*ms)},
		tick{1500 * ms, 1, yes(3, 1500*ms)},            // ⌈10·0.5⌉ + 1 + 1 = 7
		tick{2500 * ms, 1, yes(8, 1500*ms)},            // prev=2 weighted ⌈1⌉, cur 1
		tick{4200 * ms, 1, yes(9, 1800*ms)},            // two windows on: prev is 0
		tick{3500 * ms, 1, yes(8, 2500*ms)},            // clock back: counted in the newest window
		tick{4200 * ms, 9, no(8, 1299985*us, 1800*ms)}, // admitted at about 5.5s: ⌈2·0.5⌉ + 9 = 10
	)
	runSteps(t, sluice.SlidingWindow(10, s), steps)
}

// bucketSteps is shared by the token bucket and GCRA, which must decide
// identically: rate 10/s (one per 100ms), burst 3.
var bucketSteps = []tick{
	{0, 1, yes(2, 100*ms)},
	{0, 2, yes(0, 300*ms)},
	{0, 1, no(0, 100*ms, 300*ms)},
	{100 * ms, 1, yes(0, 300*ms)}, // the exact refill instant
	{200*ms - us, 1, no(0, us, 200*ms+us)},
	{200 * ms, 0, sluice.Decision{Allowed: true, Remaining: 1, ResetAfter: 200 * ms}},
	{200 * ms, 2, no(1, 100*ms, 200*ms)}, // more than remains: wait for the second
	{s, 3, yes(0, 300*ms)},
	{900 * ms, 1, no(0, 200*ms, 400*ms)}, // clock back: nothing refills before 1s
	{1100 * ms, 1, yes(0, 300*ms)},
}

func TestTokenBucket(t *testing.T) {
	runSteps(t, sluice.TokenBucket(sluice.PerSecond(10), 3), bucketSteps)
}

func TestGCRA(t *testing.T) {
	runSteps(t, sluice.GCRA(sluice.PerSecond(10), 3), bucketSteps)
}

// A rate that is not a whole number of microseconds per request stays
// exact: under saturating load a 3/s bucket admits its k-th request after
// the initial burst at exactly ⌈k·10⁶/3⌉ µs, with no rounding carried over.
func TestBucketFractionalRate(t *testing.T) {
	for _, l := range []sluice.Limit{sluice.TokenBucket(sluice.PerSecond(3), 2), sluice.GCRA(sluice.PerSecond(3), 2)} {
		p := compile(t, l)
		var st State
		now := int64(t0)
		for range 2 {
			if !Step(&p, &st, now, 1, NoMaxDelay, 0, true).Allowed {
				t.Fatalf("%s: burst refused", l)
			}
		}
		for k := int64(1); k <= 3000; k++ {
			d := Step(&p, &st, now, 1, NoMaxDelay, 0, true)
			if d.Allowed {
				t.Fatalf("%s: request %d admitted early at %d", l, k, now-t0)
			}
			now += int64(d.RetryAfter / us)
			if d = Step(&p, &st, now, 1, NoMaxDelay, 0, true); !d.Allowed {
				t.Fatalf("%s: request %d refused at its RetryAfter", l, k)
			}
			if want := t0 + ceilDiv(k*1_000_000, 3); now != want {
				t.Fatalf("%s: request %d admitted at %d, want %d", l, k, now-t0, want-t0)
			}
		}
	}
}

func TestLeakyBucket(t *testing.T) {
	delayed := func(remaining int64, delay, reset time.Duration) sluice.Decision {
		return sluice.Decision{Allowed: true, Remaining: remaining, Delay: delay, ResetAfter: reset}
	}
	runSteps(t, sluice.LeakyBucket(sluice.PerSecond(10), 2), []tick{
		{0, 1, delayed(2, 0, 100*ms)},
		{0, 1, delayed(1, 100*ms, 200*ms)}, // leaves one interval after the first
		{0, 1, delayed(0, 200*ms, 300*ms)},
		{0, 1, no(0, 100*ms, 300*ms)}, // queue full
		{100 * ms, 1, delayed(0, 200*ms, 300*ms)},
		{s, 0, sluice.Decision{Allowed: true, Remaining: 3}},
	})
	runSteps(t, sluice.LeakyBucket(sluice.PerSecond(10), 2).WithNoDelay(1), []tick{
		{0, 1, delayed(2, 0, 100*ms)},
		{0, 1, delayed(1, 0, 200*ms)}, // within the nodelay allowance
		{0, 1, delayed(0, 100*ms, 300*ms)},
		{0, 1, no(0, 100*ms, 300*ms)},
	})
}

// TestLeakyBucketMaxDelay: a request whose delay would exceed the caller's
// bound is refused and not charged, and its RetryAfter is the time until
// the queue ahead has drained to the bound (or until the bucket admits it,
// if later). Each step names its own bound (NoMaxDelay: none).
func TestLeakyBucketMaxDelay(t *testing.T) {
	delayed := func(remaining int64, delay, reset time.Duration) sluice.Decision {
		return sluice.Decision{Allowed: true, Remaining: remaining, Delay: delay, ResetAfter: reset}
	}
	l := sluice.LeakyBucket(sluice.PerSecond(10), 3) // interval 100ms, longest delay 300ms
	p := compile(t, l)
	var st State
	for i, sp := range []struct {
		at       time.Duration
		cost     int64
		maxDelay int64 // µs
		want     sluice.Decision
	}{
		{0, 1, 150_000, delayed(3, 0, 100*ms)},
		{0, 1, 150_000, delayed(2, 100*ms, 200*ms)},
		{0, 1, 150_000, no(2, 50*ms, 200*ms)},       // would wait 200ms: refused, not charged
		{0, 1, 150_000, no(2, 50*ms, 200*ms)},       // so the same again
		{0, 0, 150_000, no(2, 50*ms, 200*ms)},       // a peek says the same
		{0, 1, 200_000, delayed(1, 200*ms, 300*ms)}, // a caller who waits longer gets the place
		{0, 1, NoMaxDelay, delayed(0, 300*ms, 400*ms)},
		{0, 1, 150_000, no(0, 250*ms, 400*ms)}, // the fifth would wait 400ms: the later of 100ms and 400-150ms
		{0, 1, 0, no(0, 400*ms, 400*ms)},       // bound 0: only an undelayed start
		{50 * ms, 1, 199_999, no(0, 150*ms+us, 350*ms)},
		{200 * ms, 1, 200_000, delayed(1, 200*ms, 300*ms)}, // exactly the bound
		{300 * ms, 2, 150_000, no(2, 50*ms, 200*ms)},       // cost 2 fits, but would wait 200ms
		{350 * ms, 2, 150_000, delayed(0, 150*ms, 350*ms)},
	} {
		if err := p.Check(sluice.Request{Limit: l, Cost: sp.cost}); err != nil {
			t.Fatal(err)
		}
		got := Step(&p, &st, t0+int64(sp.at/us), sp.cost, sp.maxDelay, 0, true)
		want := sp.want
		want.Limit = p.Cap
		if got != want {
			t.Errorf("step %d (t=%s cost %d max delay %dµs):\n got %+v\nwant %+v", i, sp.at, sp.cost, sp.maxDelay, got, want)
		}
	}
}

// TestWarmUpGuava replays the example of Guava's SmoothWarmingUp
// documentation: rate 5/s, warm-up 3s, successive single acquires, each made
// as soon as the previous wait ends. Guava prints (measured on a real clock)
// waits of about 0, 0.56, 0.52, 0.46, 0.41, 0.36, 0.30, 0.25, 0.20, 0.20 s.
func TestWarmUpGuava(t *testing.T) {
	l := sluice.WarmUp(sluice.PerSecond(5), 3*s)
	p := compile(t, l)
	var st State
	documented := []float64{0, 0.56, 0.52, 0.46, 0.41, 0.36, 0.30, 0.25, 0.20, 0.20}
	// The exact waits: the stored-permit integral of each acquire, in µs.
	exact := []int64{0, 573334, 520000, 466667, 413334, 360000, 306667, 253334, 206667, 200000, 200000}
	now := int64(t0)
	for i, want := range exact {
		d := Step(&p, &st, now, 1, NoMaxDelay, 0, true)
		var wait int64
		if !d.Allowed {
			wait = int64(d.RetryAfter / us)
			now += wait
			d = Step(&p, &st, now, 1, NoMaxDelay, 0, true)
			if !d.Allowed {
				t.Fatalf("acquire %d refused after waiting %dµs", i, wait)
			}
		}
		if wait != want {
			t.Errorf("acquire %d waited %dµs, want %dµs", i, wait, want)
		}
		if i < len(documented) && math.Abs(float64(wait)/1e6-documented[i]) > 0.015 {
			t.Errorf("acquire %d waited %.3fs, Guava documents %.2fs", i, float64(wait)/1e6, documented[i])
		}
	}
	// After idling for the warm-up period and more, it is cold again.
	now += int64(10 * s / us)
	if d := Step(&p, &st, now, 1, NoMaxDelay, 0, true); !d.Allowed {
		t.Fatal("first request after idling refused")
	}
	if d := Step(&p, &st, now, 1, NoMaxDelay, 0, true); d.RetryAfter != 573334*us {
		t.Fatalf("cold again: wait %s, want 573.334ms", d.RetryAfter)
	}
}

func TestConcurrency(t *testing.T) {
	l := sluice.Concurrency(2, 10*s)
	p := compile(t, l)
	var st State
	at := func(d time.Duration) int64 { return t0 + int64(d/us) }
	take := func(now int64, lease uint64) sluice.Decision { return Step(&p, &st, now, 1, NoMaxDelay, lease, true) }

	if d := take(at(0), 1); !d.Allowed || d.Lease != 1 || d.Remaining != 1 {
		t.Fatalf("first: %+v", d)
	}
	if d := take(at(0), 2); !d.Allowed || d.Lease != 2 || d.Remaining != 0 {
		t.Fatalf("second: %+v", d)
	}
	if d := take(at(s), 3); d.Allowed || d.RetryAfter != 9*s || d.Lease != 0 {
		t.Fatalf("third while full: %+v", d)
	}
	if !Release(&st, 1) || Release(&st, 1) {
		t.Fatal("release of lease 1: want true once, then false")
	}
	if d := take(at(s), 3); !d.Allowed || d.Lease != 3 {
		t.Fatalf("after release: %+v", d)
	}
	// Lease 2 was never released: it expires at 10s and frees its slot.
	if d := take(at(10*s-us), 4); d.Allowed || d.RetryAfter != us {
		t.Fatalf("just before expiry: %+v", d)
	}
	if d := take(at(10*s), 4); !d.Allowed || d.ResetAfter != 10*s {
		t.Fatalf("at expiry: %+v", d)
	}
}

func TestCheckCost(t *testing.T) {
	limits := []sluice.Limit{
		sluice.FixedWindow(5, s), sluice.SlidingLog(5, s), sluice.SlidingWindow(5, s),
		sluice.TokenBucket(sluice.PerSecond(1), 5), sluice.GCRA(sluice.PerSecond(1), 5),
		sluice.LeakyBucket(sluice.PerSecond(1), 4), sluice.WarmUp(sluice.PerSecond(5), s),
		sluice.Concurrency(5, s),
	}
	for _, l := range limits {
		p := compile(t, l)
		if err := p.CheckCost(5, l); err != nil {
			t.Errorf("%s: cost 5 (the capacity): %v", l, err)
		}
		if err := p.CheckCost(6, l); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Errorf("%s: cost 6: got %v, want ErrCostExceedsCapacity", l, err)
		}
		if err := p.CheckCost(-1, l); !errors.Is(err, sluice.ErrNegativeCost) {
			t.Errorf("%s: cost -1: got %v, want ErrNegativeCost", l, err)
		}
	}
}

// TestClockBackwardsFarGCRA checks the arithmetic stays exact and refusing
// when a shared clock jumps back by hours.
func TestClockBackwardsFarGCRA(t *testing.T) {
	for _, l := range []sluice.Limit{sluice.GCRA(sluice.PerSecond(1000), 10), sluice.TokenBucket(sluice.PerSecond(1000), 10)} {
		p := compile(t, l)
		var st State
		for range 10 {
			Step(&p, &st, t0, 1, NoMaxDelay, 0, true)
		}
		back := int64(t0 - 3*3600*1_000_000)
		d := Step(&p, &st, back, 1, NoMaxDelay, 0, true)
		if d.Allowed || d.RetryAfter != 3*time.Hour+ms {
			t.Errorf("%s: 3h back: %+v, want refused for 3h1ms", l, d)
		}
	}
}

// TestLongestDelay: the last place of a full queue gets LongestDelay, and
// it is the longest delay any request gets.
func TestLongestDelay(t *testing.T) {
	for _, l := range []sluice.Limit{
		sluice.LeakyBucket(sluice.PerSecond(2), 3),
		sluice.LeakyBucket(sluice.PerSecond(3), 4).WithNoDelay(1),
		sluice.LeakyBucket(sluice.Per(7, 3*s), 5).WithNoDelay(5),
		sluice.LeakyBucket(sluice.PerSecond(1), 0),
	} {
		p := compile(t, l)
		var st State
		var longest int64
		for {
			d := Step(&p, &st, t0, 1, NoMaxDelay, 0, true)
			if !d.Allowed {
				break
			}
			longest = int64(d.Delay / us)
		}
		if got := p.LongestDelay(); got != longest {
			t.Errorf("%s: LongestDelay %dµs, the last place waits %dµs", l, got, longest)
		}
	}
}
