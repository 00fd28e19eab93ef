package memstore

import (
	"runtime"
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

// TestStaleReadingDecidesAtLatest: a reading older than a time the key has
// already been decided at, as a goroutine descheduled between reading the
// clock and taking the lock holds, decides at that later time. The
// readings are made by hand through the coarse clock (whose ticker never
// ticks here: a Resolution of an hour). A clock given as Config.Now is
// used as it reads, even going back (the conformance suite moves it back
// to compare what both stores then do).
func TestStaleReadingDecidesAtLatest(t *testing.T) {
	lim := sluice.GCRA(sluice.PerSecond(1), 10) // one per second, ten at once
	r := sluice.Request{Key: "k", Limit: lim, Cost: 1}
	const t0 = int64(1_700_000_040_000_000)
	for _, tc := range []struct {
		name      string
		staleWins bool // the stale request is admitted (decided at t0+5s)
	}{
		{"own clock", true},
		{"Config.Now", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reading atomic.Int64
			cfg := Config{SweepInterval: -1, Resolution: time.Hour}
			if !tc.staleWins {
				cfg.Now = func() time.Time { return time.UnixMicro(reading.Load()) }
			}
			s := newStore(t, cfg)
			take := func(at int64) sluice.Decision {
				t.Helper()
				reading.Store(at)
				s.coarse.Store(at)
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			for range 10 {
				take(t0)
			}
			if d := take(t0); d.Allowed {
				t.Fatalf("an eleventh request at t0 admitted: %+v", d)
			}
			if d := take(t0 + 5_000_000); !d.Allowed || d.Remaining != 4 {
				t.Fatalf("at t0+5s: %+v, want admitted with 4 remaining", d)
			}
			stale := take(t0 + 500_000)
			if tc.staleWins && (!stale.Allowed || stale.Remaining != 3) {
				t.Fatalf("reading t0+0.5s after a decision at t0+5s: %+v, want admitted as at t0+5s with 3 remaining", stale)
			}
			if !tc.staleWins && stale.Allowed {
				t.Fatalf("Config.Now read t0+0.5s after t0+5s: %+v, want refused as at t0+0.5s", stale)
			}
		})
	}
}
