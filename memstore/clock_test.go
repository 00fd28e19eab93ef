package memstore

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// bottomless is a limit no caller can exhaust: GCRA at 2^30 requests per
// second with a burst of 2^20 holds about a millisecond of refill, far more
// than any number of goroutines can take in a millisecond on one machine.
// A refusal under it can only come from deciding at a time earlier than
// one already used.
var bottomless = sluice.GCRA(sluice.PerSecond(1<<30), 1<<20)

// TestStaleReadingUnderLoad: many more goroutines than cores hammer one key
// under a limit that can never be exhausted, with the store's own clock. A
// goroutine descheduled between reading the clock and deciding holds a
// reading older than times other goroutines have already used; it must
// still be admitted. It runs for a bounded time (a refusal ends it early).
func TestStaleReadingUnderLoad(t *testing.T) {
	goroutines := 8 * runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"exact", Config{Resolution: -1}},
		{"coarse", Config{}},
		{"coarse 50µs", Config{Resolution: 50 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.cfg)
			var refused, decided atomic.Int64
			var first atomic.Pointer[sluice.Decision]
			stop := time.Now().Add(time.Second)
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					r := sluice.Request{Key: "hot", Limit: bottomless, Cost: 1}
					for refused.Load() == 0 && time.Now().Before(stop) {
						for range 64 {
							d, err := s.Take(ctx, r)
							if err != nil {
								t.Error(err)
								return
							}
							decided.Add(1)
							if !d.Allowed {
								refused.Add(1)
								first.CompareAndSwap(nil, &d)
							}
						}
					}
				})
			}
			wg.Wait()
			if n := refused.Load(); n > 0 {
				t.Fatalf("%d of %d requests refused from %d goroutines under %s, first %+v", n, decided.Load(), goroutines, bottomless, *first.Load())
			}
			t.Logf("%d requests from %d goroutines, none refused", decided.Load(), goroutines)
		})
	}
}

// TestReadingTakenUnderTheLock: a decision that waits for its key's lock
// reads the clock once it holds it, so it is made at a time no earlier
// than those of the decisions it waited for. The coarse clock is moved by
// hand (its ticker never ticks here: a Resolution of an hour) while the
// request waits; read before the lock, the earlier reading would refuse
// it.
func TestReadingTakenUnderTheLock(t *testing.T) {
	lim := sluice.GCRA(sluice.PerSecond(1), 10) // one per second, ten at once
	r := sluice.Request{Key: "k", Limit: lim, Cost: 1}
	const t0 = int64(1_700_000_040_000_000)
	s := newStore(t, Config{SweepInterval: -1, Resolution: time.Hour})
	s.coarse.Store(readAt(t0))
	for range 10 {
		if d, _ := s.Take(ctx, r); !d.Allowed {
			t.Fatalf("request within the burst at t0 refused: %+v", d)
		}
	}
	// Half a second on, the key is still closed for another half: under
	// a second, which the lock's path decides (refuse leaves it alone).
	s.coarse.Store(readAt(t0 + 500_000))
	e := s.shards[s.shardOf(s.hash("k"))].lookup(s.hash("k"), "k", &lim)
	e.mu.Lock()
	got := make(chan sluice.Decision)
	go func() {
		d, err := s.Take(ctx, r)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	waitBlockedOnLock(t)
	s.coarse.Store(readAt(t0 + 5_000_000))
	e.mu.Unlock()
	if d := <-got; !d.Allowed || d.Remaining != 4 {
		t.Fatalf("a request that waited while the clock moved from t0+0.5s to t0+5s: %+v, want admitted as at t0+5s with 4 remaining", d)
	}
}

// waitBlockedOnLock waits until a goroutine waits for a sync.Mutex, by its
// stack.
func waitBlockedOnLock(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "Mutex).lockSlow") {
		if time.Now().After(deadline) {
			t.Fatal("no goroutine waits for the entry's lock after 10 s")
		}
		runtime.Gosched()
	}
}

// TestGivenClockUsedAsItReads: Config.Now's readings are used as they are,
// even one earlier than a time already used (the conformance suite moves
// it back to compare what both stores then do).
func TestGivenClockUsedAsItReads(t *testing.T) {
	lim := sluice.GCRA(sluice.PerSecond(1), 10)
	r := sluice.Request{Key: "k", Limit: lim, Cost: 1}
	c := newClock()
	s := newStore(t, Config{SweepInterval: -1, Now: c.now})
	take := func() sluice.Decision {
		t.Helper()
		d, err := s.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 10 {
		take()
	}
	if d := take(); d.Allowed {
		t.Fatalf("an eleventh request at once admitted: %+v", d)
	}
	c.advance(5 * time.Second)
	if d := take(); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("5 s on: %+v, want admitted with 4 remaining", d)
	}
	c.advance(-4500 * time.Millisecond)
	if d := take(); d.Allowed {
		t.Fatalf("Config.Now moved back 4.5 s: %+v, want refused as at that time", d)
	}
}

// TestCoarseReadingNeverGoesBack: every write to the coarse reading raises
// it, keeping its sign for a tick (negative: not yet read), except the
// ticker's 0 when it sleeps; and the exact readings of TakeAll and of a
// recheck leave it alone (a write to the line every decision reads, for
// each of them, would make it a point of contention across all keys).
func TestCoarseReadingNeverGoesBack(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1, Resolution: time.Hour})
	for _, step := range []struct {
		from, v int64
		how     int
		want    int64
	}{
		{-100, 50, raiseTick, -100}, {-100, 200, raiseTick, -200}, {100, 200, raiseTick, -200},
		{100, 50, raiseRead, 100}, {-100, 200, raiseRead, 200}, {0, 200, raiseRead, 200},
	} {
		s.coarse.Store(reading(step.from))
		s.raise(step.v, step.how)
		if got := s.coarse.Load(); got != reading(step.want) {
			t.Errorf("raise(%d, %d) from %d: %d, want %d", step.v, step.how, step.from, got, step.want)
		}
	}
	start := s.readClock()
	s.coarse.Store(readAt(start))
	lim := sluice.TokenBucket(sluice.PerSecond(1000), 1) // a token per ms
	ds := make([]sluice.Decision, 1)
	if err := s.TakeAll(ctx, []sluice.Request{{Key: "k", Limit: lim, Cost: 1}}, ds); err != nil || !ds[0].Allowed {
		t.Fatalf("TakeAll: %+v, %v", ds[0], err)
	}
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1}); d.RetryAfter >= recheckBelow {
		t.Fatalf("refused at once after TakeAll: %+v, want a refusal under a second (decided again at the exact time)", d)
	}
	if c := s.coarse.Load(); c != readAt(start) {
		t.Fatalf("TakeAll and a recheck moved the coarse reading from %d to %d", start, c)
	}
}

// TestDecisionsAfterTheExactTime: after TakeAll or a recheck decided a key
// at the exact time, which the coarse reading is behind, the key's next
// decisions are made at that time, not at the earlier coarse reading
// (which would take the refill between the two as not yet come), until
// the coarse reading passes it. The coarse reading is set half a second
// behind by hand (its ticker never ticks here).
func TestDecisionsAfterTheExactTime(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1, Resolution: time.Hour})
	s.coarse.Store(readAt(s.readClock() - 500_000))

	slow := sluice.GCRA(sluice.PerHour(5000), 5000)
	ds := make([]sluice.Decision, 1)
	if err := s.TakeAll(ctx, []sluice.Request{{Key: "all", Limit: slow, Cost: 2}}, ds); err != nil || ds[0].Remaining != 4998 {
		t.Fatalf("TakeAll of 2: %+v, %v", ds[0], err)
	}
	if d, _ := s.Take(ctx, sluice.Request{Key: "all", Limit: slow}); d.Remaining != 4998 {
		t.Fatalf("a peek after TakeAll: %+v, want 4998 remaining, as at TakeAll's time", d)
	}

	fast := sluice.TokenBucket(sluice.PerSecond(1000), 2)
	r := sluice.Request{Key: "recheck", Limit: fast, Cost: 2}
	if d, _ := s.Take(ctx, r); !d.Allowed {
		t.Fatalf("2 of a fresh bucket of 2: %+v", d)
	}
	r.Cost = 1
	if d, _ := s.Take(ctx, r); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("refused at the coarse reading, then at the exact time half a second on: %+v, want admitted with 1 remaining", d)
	}
	r.Cost = 0
	if d, _ := s.Take(ctx, r); d.Remaining != 1 {
		t.Fatalf("a peek after the recheck: %+v, want 1 remaining, as at the recheck's time", d)
	}
	h := s.hash("recheck")
	e := s.shards[s.shardOf(h)].lookup(h, "recheck", &fast)
	s.coarse.Store(readAt(s.readClock() + 1))
	s.Take(ctx, r)
	if w := e.shut.Load(); w < 0 {
		t.Fatalf("the coarse reading passed the exact time, and the key is still marked: %d", w)
	}
}
