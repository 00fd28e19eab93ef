package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

var ctx = context.Background()

// clock is a settable test clock.
type clock struct{ us atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.us.Store(1_700_000_040_000_000)
	return c
}

func (c *clock) now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *clock) advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }
func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// everyLimit has one limit per algorithm with the number of unit requests it
// admits at one instant from fresh: its bound under a frozen clock.
var everyLimit = []struct {
	lim   sluice.Limit
	bound int64
}{
	{sluice.FixedWindow(50, time.Minute), 50},
	{sluice.SlidingLog(50, time.Minute), 50},
	{sluice.SlidingWindow(50, time.Minute), 50},
	{sluice.TokenBucket(sluice.PerSecond(1), 50), 50},
	{sluice.GCRA(sluice.PerSecond(1), 50), 50},
	{sluice.LeakyBucket(sluice.PerSecond(1), 49), 50},
	{sluice.WarmUp(sluice.PerSecond(1), time.Second), 1},
	{sluice.Concurrency(50, time.Minute), 50},
}

// TestConcurrentExactBound floods keys from many goroutines with the clock
// frozen: every algorithm must admit exactly its bound per key, not one more,
// not one fewer. Run under -race.
func TestConcurrentExactBound(t *testing.T) {
	for _, tc := range everyLimit {
		t.Run(tc.lim.Algorithm.String(), func(t *testing.T) {
			clk := newClock()
			s := newStore(t, Config{Now: clk.now})
			const goroutines, keys, tries = 32, 100, 400
			var admitted [keys]atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range tries {
						k := (g*7 + i) % keys
						d, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("k", k), Limit: tc.lim, Cost: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
					}
				})
			}
			wg.Wait()
			for k := range admitted {
				if got := admitted[k].Load(); got != tc.bound {
					t.Fatalf("key %d: admitted %d, want exactly %d", k, got, tc.bound)
				}
			}
		})
	}
}

// TestConcurrentOneKeyRealClock floods one token-bucket key with the real
// clock (exact and coarse) for a bounded time and checks the count against
// burst + rate·t, and from below against what the bucket certainly gave
// out: from the last time it was full (an admission that left Remaining at
// burst-1) to the last refusal (it was empty) it never overflowed, so it
// admitted at least a burst plus the refill in between. A machine that
// keeps the goroutines from running lets the bucket fill and overflow, and
// the bound follows it rather than hoping the goroutines ran.
func TestConcurrentOneKeyRealClock(t *testing.T) {
	for name, res := range map[string]time.Duration{"exact": -1, "coarse": 0} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, Config{Resolution: res})
			lim := sluice.TokenBucket(sluice.PerSecond(1000), 100)
			var admitted, lastFull, lastRefused atomic.Int64
			raise := func(v *atomic.Int64, to time.Duration) {
				for o := v.Load(); int64(to) > o && !v.CompareAndSwap(o, int64(to)); o = v.Load() {
				}
			}
			start := time.Now() // not after the bucket's first reading
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for time.Since(start) < 200*time.Millisecond {
						before := time.Since(start)
						d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: lim, Cost: 1})
						switch {
						case err != nil:
							t.Error(err)
							return
						case !d.Allowed:
							raise(&lastRefused, before)
						case d.Remaining == 99:
							raise(&lastFull, time.Since(start))
							fallthrough
						default:
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			hi := 100 + int64(elapsed.Seconds()*1000) + 1
			lo := int64(0)
			if full, empty := time.Duration(lastFull.Load()), time.Duration(lastRefused.Load()); empty > full {
				lo = 100 + int64((empty-full).Seconds()*1000) - 1
			}
			if got := admitted.Load(); got > hi || got < lo {
				t.Fatalf("admitted %d in %s, want between %d (last full at %s, last empty at %s) and burst + rate·t = %d",
					got, elapsed, lo, time.Duration(lastFull.Load()), time.Duration(lastRefused.Load()), hi)
			}
		})
	}
}

// TestTakeAllAllOrNothing compares a store that receives composite checks
// with a twin that receives only the checks that were admitted, one request
// at a time: their states must stay identical, so a refused check charged
// nothing and an admitted one charged exactly what separate requests would.
func TestTakeAllAllOrNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clk := newClock()
		a := newStore(t, Config{Now: clk.now, SweepInterval: -1})
		b := newStore(t, Config{Now: clk.now, SweepInterval: -1})
		limits := []sluice.Limit{
			sluice.FixedWindow(5, time.Second), sluice.SlidingLog(5, time.Second),
			sluice.SlidingWindow(5, time.Second), sluice.TokenBucket(sluice.PerSecond(5), 5),
			sluice.GCRA(sluice.PerSecond(3), 4), sluice.LeakyBucket(sluice.PerSecond(5), 3),
			sluice.Concurrency(4, time.Second),
		}
		type dim struct {
			key string
			lim sluice.Limit
		}
		var pool []dim
		for _, k := range []string{"global", "ip:1", "user:7"} {
			for _, l := range limits {
				pool = append(pool, dim{k, l})
			}
		}
		for range rapid.IntRange(1, 60).Draw(rt, "checks") {
			clk.advance(time.Duration(rapid.IntRange(0, 400).Draw(rt, "gap_ms")) * time.Millisecond)
			picks := rapid.SliceOfNDistinct(rapid.IntRange(0, len(pool)-1), 1, 4, rapid.ID[int]).Draw(rt, "dims")
			reqs := make([]sluice.Request, len(picks))
			for i, p := range picks {
				reqs[i] = sluice.Request{Key: pool[p].key, Limit: pool[p].lim, Cost: rapid.Int64Range(1, 3).Draw(rt, "cost")}
				if rapid.Bool().Draw(rt, "bounded") { // a delay beyond the bound refuses the whole check
					reqs[i].MaxDelay = time.Duration(rapid.IntRange(1, 800).Draw(rt, "max_delay_ms")) * time.Millisecond
				}
			}
			ds := make([]sluice.Decision, len(reqs))
			if err := a.TakeAll(ctx, reqs, ds); err != nil {
				rt.Fatal(err)
			}
			all := true
			for _, d := range ds {
				all = all && d.Allowed
			}
			if all {
				for i, r := range reqs {
					d, err := b.Take(ctx, r)
					if err != nil || !d.Allowed {
						rt.Fatalf("request %d admitted in the check, alone: %+v %v", i, d, err)
					}
					d.Lease, ds[i].Lease = 0, 0
					if d != ds[i] {
						rt.Fatalf("request %d: check decided %+v, alone %+v", i, ds[i], d)
					}
				}
			} else {
				refusedForReal := false
				for _, d := range ds {
					refusedForReal = refusedForReal || d.RetryAfter > 0
				}
				if !refusedForReal {
					rt.Fatalf("check refused but no request has a RetryAfter: %+v", ds)
				}
			}
			for _, p := range pool {
				pa, _ := a.Take(ctx, sluice.Request{Key: p.key, Limit: p.lim})
				pb, _ := b.Take(ctx, sluice.Request{Key: p.key, Limit: p.lim})
				if pa != pb {
					rt.Fatalf("%s %s diverged: composite store %+v, twin %+v", p.key, p.lim, pa, pb)
				}
			}
		}
	})
}

func TestTakeAllErrors(t *testing.T) {
	s := newStore(t, Config{})
	lim := sluice.TokenBucket(sluice.PerSecond(1), 1)
	dup := []sluice.Request{{Key: "a", Limit: lim, Cost: 1}, {Key: "a", Limit: lim, Cost: 1}}
	if err := s.TakeAll(ctx, dup, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrDuplicateRequest) {
		t.Errorf("duplicate: %v", err)
	}
	// The same key under two limits is two states, not a duplicate.
	two := []sluice.Request{{Key: "a", Limit: lim, Cost: 1}, {Key: "a", Limit: sluice.FixedWindow(1, time.Second), Cost: 1}}
	ds := make([]sluice.Decision, 2)
	if err := s.TakeAll(ctx, two, ds); err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Errorf("same key, two limits: %v %+v", err, ds)
	}
	bad := []sluice.Request{{Key: "b", Limit: lim, Cost: 1}, {Key: "c", Limit: lim, Cost: 2}}
	if err := s.TakeAll(ctx, bad, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("cost above capacity: %v", err)
	}
	if d, _ := s.Take(ctx, sluice.Request{Key: "b", Limit: lim, Cost: 1}); !d.Allowed {
		t.Error("a check that failed with an error charged its first request")
	}
	if err := s.TakeAll(ctx, bad, make([]sluice.Decision, 1)); err == nil {
		t.Error("short decision slice accepted")
	}
}

func TestTakeErrors(t *testing.T) {
	s := newStore(t, Config{})
	_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.TokenBucket(sluice.PerSecond(0), 1), Cost: 1})
	if !errors.Is(err, sluice.ErrInvalidLimit) || err.Error() != "sluice: invalid limit: token_bucket: count must be at least 1 (got 0)" {
		t.Errorf("invalid limit: %v", err)
	}
	lim := sluice.FixedWindow(3, time.Second)
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 4}); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("cost 4 on capacity 3: %v", err)
	}
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: -1}); !errors.Is(err, sluice.ErrNegativeCost) {
		t.Errorf("negative cost: %v", err)
	}
	negative := func(key string) {
		_, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1, MaxDelay: -time.Millisecond})
		if !errors.Is(err, sluice.ErrNegativeMaxDelay) || err.Error() != `sluice: negative max delay: -1ms for key "`+key+`" under fixed_window(3 per 1s)` {
			t.Errorf("negative max delay on %s: %v", key, err)
		}
		rs := []sluice.Request{{Key: "other", Limit: lim, Cost: 1}, {Key: key, Limit: lim, Cost: 1, MaxDelay: -1}}
		if err := s.TakeAll(ctx, rs, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrNegativeMaxDelay) {
			t.Errorf("negative max delay in a check on %s: %v", key, err)
		}
	}
	negative("k")
	if n := s.Len(); n != 0 {
		t.Errorf("requests that failed stored %d keys", n)
	}
	s.Take(ctx, sluice.Request{Key: "held", Limit: lim, Cost: 1})
	negative("held") // a key the store holds
	if d, _ := s.Take(ctx, sluice.Request{Key: "held", Limit: lim}); d.Remaining != 2 {
		t.Errorf("requests that failed charged a held key: %+v", d)
	}
	s.Close()
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPeekDoesNotStore(t *testing.T) {
	s := newStore(t, Config{})
	d, err := s.Take(ctx, sluice.Request{Key: "new", Limit: sluice.FixedWindow(3, time.Second), Cost: 0})
	if err != nil || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("peek at a fresh key: %+v %v", d, err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("a peek stored %d keys", n)
	}
}

// TestKeyBound sprays distinct keys through a small store while one hot key
// is used between them: memory stays within the bound and the hot key, the
// most recently used, is never forgotten, so its limit holds exactly.
func TestKeyBound(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{MaxKeys: 64, Shards: 4, Now: clk.now, SweepInterval: -1})
	hot := sluice.FixedWindow(100, time.Hour)
	cold := sluice.TokenBucket(sluice.PerSecond(1), 1)
	admitted := 0
	for i := range 10_000 {
		if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("attacker-", i), Limit: cold, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("after %d keys the store holds %d, bound 64", i+1, n)
		}
		if d, _ := s.Take(ctx, sluice.Request{Key: "hot", Limit: hot, Cost: 1}); d.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("hot key admitted %d, want exactly 100", admitted)
	}
}

func TestSweepRemovesIdleKeys(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{Now: clk.now, SweepInterval: -1})
	for i := range 1000 {
		s.Take(ctx, sluice.Request{Key: fmt.Sprint("k", i), Limit: sluice.TokenBucket(sluice.PerSecond(10), 1), Cost: 1})
	}
	s.Take(ctx, sluice.Request{Key: "daily", Limit: sluice.FixedWindow(1000, 24*time.Hour), Cost: 1})
	if n := s.Len(); n != 1001 {
		t.Fatalf("holds %d keys, want 1001", n)
	}
	clk.advance(99 * time.Millisecond)
	s.sweep()
	if n := s.Len(); n != 1001 {
		t.Fatalf("swept keys that were not idle yet: %d left", n)
	}
	clk.advance(time.Millisecond) // the buckets are full again
	s.sweep()
	if n := s.Len(); n != 1 {
		t.Fatalf("after the buckets refilled %d keys remain, want only the daily window", n)
	}
}

func TestSweeperRunsAndStops(t *testing.T) {
	clk := newClock()
	s, err := New(Config{Now: clk.now, SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.TokenBucket(sluice.PerSecond(10), 1), Cost: 1})
	clk.advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background sweeper did not remove an idle key within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	s.Close() // returns only once the sweeper goroutine has exited
}

func TestConcurrencyRelease(t *testing.T) {
	s := newStore(t, Config{})
	lim := sluice.Concurrency(1, time.Minute)
	d, _ := s.Take(ctx, sluice.Request{Key: "job", Limit: lim, Cost: 1})
	if !d.Allowed || d.Lease == 0 {
		t.Fatalf("first: %+v", d)
	}
	if d2, _ := s.Take(ctx, sluice.Request{Key: "job", Limit: lim, Cost: 1}); d2.Allowed {
		t.Fatal("second admitted while the first holds the only slot")
	}
	if err := s.Release(ctx, sluice.Request{Key: "job", Limit: lim}, d.Lease); err != nil {
		t.Fatal(err)
	}
	if d3, _ := s.Take(ctx, sluice.Request{Key: "job", Limit: lim, Cost: 1}); !d3.Allowed || d3.Lease == d.Lease {
		t.Fatalf("after release: %+v", d3)
	}
}

// TestZeroAllocs: a decision on a key the store holds allocates nothing, for
// every algorithm, and so does a composite check with caller-owned slices.
func TestZeroAllocs(t *testing.T) {
	s := newStore(t, Config{})
	for _, tc := range everyLimit {
		r := sluice.Request{Key: "user:42", Limit: tc.lim, Cost: 1}
		for range 100 {
			s.Take(ctx, r) // create the key and grow any log to its working size
		}
		if n := testing.AllocsPerRun(1000, func() { s.Take(ctx, r) }); n != 0 {
			t.Errorf("%s: %.1f allocations per decision", tc.lim, n)
		}
	}
	reqs := []sluice.Request{
		{Key: "global", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000), 1000), Cost: 1},
		{Key: "user:42", Limit: sluice.SlidingWindow(1_000_000, time.Second), Cost: 1},
	}
	ds := make([]sluice.Decision, len(reqs))
	s.TakeAll(ctx, reqs, ds)
	if n := testing.AllocsPerRun(1000, func() { s.TakeAll(ctx, reqs, ds) }); n != 0 {
		t.Errorf("TakeAll: %.1f allocations per check", n)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{MaxKeys: -1}); err == nil {
		t.Error("negative MaxKeys accepted")
	}
	if _, err := New(Config{Shards: -1}); err == nil {
		t.Error("negative Shards accepted")
	}
}

// TestCoarseClock: by default decisions use the last reading, which the
// background goroutine advances.
func TestCoarseClock(t *testing.T) {
	s := newStore(t, Config{})
	if !s.ticking {
		t.Fatal("the default store reads the clock on every decision")
	}
	lim := sluice.FixedWindow(1000, time.Hour)
	before := s.now()
	deadline := time.Now().Add(5 * time.Second)
	for s.now() == before {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock never advanced")
		}
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if s := newStore(t, Config{Resolution: -1}); s.ticking {
		t.Fatal("a negative Resolution still reads a coarse clock")
	}
}

// TestCoarseRefusalRechecked: a refusal made as of a coarse reading that
// the exact time would admit is decided again at the exact time. The
// coarse clock here never ticks during the test (a Resolution of an hour).
func TestCoarseRefusalRechecked(t *testing.T) {
	s := newStore(t, Config{Resolution: time.Hour})
	lim := sluice.TokenBucket(sluice.PerSecond(1000), 1) // a token per ms
	r := sluice.Request{Key: "k", Limit: lim, Cost: 1}
	if d, _ := s.Take(ctx, r); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	start := time.Now()
	for time.Since(start) < 3*time.Millisecond {
		// The token is back by the exact clock; the coarse one stands still.
	}
	if d, _ := s.Take(ctx, r); !d.Allowed {
		t.Fatalf("3 ms later: %+v, want admitted (decided again at the exact time)", d)
	}
	if d, _ := s.Take(ctx, r); d.Allowed {
		t.Fatalf("a third request at once: %+v, want refused", d)
	}
}

// TestCoarseClockSleeps: the coarse clock stops ticking once no decision
// reads it, and the next decision wakes it, deciding meanwhile at the
// exact time.
func TestCoarseClockSleeps(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1})
	deadline := time.Now().Add(10 * time.Second)
	for s.coarse.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock still ticks 10 s after the last decision")
		}
		time.Sleep(time.Millisecond)
	}
	before := s.readClock()
	if now := s.now(); now < before {
		t.Fatalf("asleep, the store's time %d is before the exact time %d", now, before)
	}
	for s.coarse.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a decision did not wake the coarse clock")
		}
		time.Sleep(time.Millisecond)
	}
}
