package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestAdoptSameOnBothStores: fixed sequences of limit changes on one key,
// chosen where the carrying over matters (a sliding window's previous
// count, a window that becomes a calendar day, buckets raised and lowered
// mid-refill, a queue), decide alike on memstore and Redis at every step.
func TestAdoptSameOnBothStores(t *testing.T) {
	client := redistest.Standalone(t)
	type step struct {
		lim  sluice.Limit
		at   time.Duration
		cost int64
	}
	m, h := time.Minute, time.Hour
	for name, steps := range map[string][]step{
		"sliding window, longer": {
			{sluice.SlidingWindow(4, m), 0, 3}, {sluice.SlidingWindow(4, m), m + 10*time.Second, 2},
			{sluice.SlidingWindow(6, 2*m), m + 20*time.Second, 1}, {sluice.SlidingWindow(6, 2*m), m + 30*time.Second, 4},
			{sluice.SlidingWindow(4, m), 2*m + 5*time.Second, 1},
		},
		"sliding window, previous count dropped": {
			{sluice.SlidingWindow(6, m), 0, 4}, {sluice.SlidingWindow(6, m), 70 * time.Second, 1},
			{sluice.SlidingWindow(8, 2*m), 80 * time.Second, 1}, {sluice.SlidingWindow(8, 2*m), 90 * time.Second, 5},
		},
		"fixed window to calendar and back": {
			{sluice.FixedWindow(5, h), 0, 4}, {sluice.CalendarWindow(6, sluice.Day, "Europe/Berlin"), 10 * m, 1},
			{sluice.CalendarWindow(6, sluice.Day, "Europe/Berlin"), 20 * m, 2}, {sluice.FixedWindow(5, h), 30 * m, 1},
			{sluice.CalendarWindow(3, sluice.Month, "America/New_York"), 40 * m, 1},
		},
		// An instance whose clock is back across midnight sends the day
		// before's bounds: the same calendar, not a changed limit, so the
		// state stays in the newest day it has seen, even with nothing
		// counted in it yet (found by TestConformanceCalendar, seed
		// 14091128992495239262).
		"calendar day, clock back across midnight": {
			{sluice.CalendarWindow(1, sluice.Day, "Europe/Berlin"), -h, 1}, {sluice.CalendarWindow(1, sluice.Day, "Europe/Berlin"), 0, 0},
			{sluice.CalendarWindow(1, sluice.Day, "Europe/Berlin"), -31 * m, 1}, {sluice.CalendarWindow(1, sluice.Day, "Europe/Berlin"), -29 * m, 1},
		},
		"token bucket mid-refill": {
			{sluice.TokenBucket(sluice.Per(3, 7*time.Second), 5), 0, 5}, {sluice.TokenBucket(sluice.Per(3, 7*time.Second), 5), 3 * time.Second, 1},
			{sluice.TokenBucket(sluice.Per(2, 3*time.Second), 3), 4 * time.Second, 1}, {sluice.TokenBucket(sluice.Per(5, 11*time.Second), 9), 6 * time.Second, 4},
		},
		"gcra and leaky bucket": {
			{sluice.GCRA(sluice.Per(3, 7*time.Second), 4), 0, 4}, {sluice.GCRA(sluice.Per(2, 5*time.Second), 2), time.Second, 1},
			{sluice.GCRA(sluice.Per(7, 5*time.Second), 8), 2 * time.Second, 3},
		},
		"leaky bucket queue": {
			{sluice.LeakyBucket(sluice.PerSecond(2), 4), 0, 1}, {sluice.LeakyBucket(sluice.PerSecond(2), 4), 0, 3},
			{sluice.LeakyBucket(sluice.Per(3, 2*time.Second), 2).WithNoDelay(1), 100 * time.Millisecond, 1},
			{sluice.LeakyBucket(sluice.PerSecond(1), 6), 200 * time.Millisecond, 2},
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := &fakeClock{}
			base := time.Date(2026, 3, 28, 23, 30, 0, 0, time.UTC).UnixMicro() // near a DST change in Berlin
			mem, err := memstore.New(memstore.Config{Now: clk.now, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			red, err := redisstore.New(client, redisstore.Config{Prefix: redistest.Prefix(t), Now: clk.now, NearCache: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer red.Close()
			for i, st := range steps {
				clk.us.Store(base + int64(st.at/time.Microsecond))
				r := sluice.Request{Key: "k", Limit: st.lim, Cost: st.cost}
				dm, errM := mem.Take(context.Background(), r)
				dr, errR := red.Take(context.Background(), r)
				if errM != nil || errR != nil {
					t.Fatalf("step %d: %v, %v", i, errM, errR)
				}
				if dm.Remaining < 0 {
					t.Fatalf("step %d: negative remaining %+v", i, dm)
				}
				if dm != dr {
					t.Fatalf("step %d %s cost %d:\n  memstore   %+v\n  redisstore %+v", i, st.lim, st.cost, dm, dr)
				}
			}
		})
	}
}

// TestChangedLimitKeyOutlivesOldWindow: a count carried over to a longer
// window extends the key's TTL to that window's end, so Redis does not
// expire it (a fresh quota) when the old, shorter one would have ended.
func TestChangedLimitKeyOutlivesOldWindow(t *testing.T) {
	client, prefix := redistest.Standalone(t), redistest.Prefix(t)
	clk := &fakeClock{}
	clk.us.Store(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixMicro())
	s, err := redisstore.New(client, redisstore.Config{Prefix: prefix, Now: clk.now, NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for range 3 {
		s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(3, time.Minute), Cost: 1})
	}
	clk.us.Add(30_000_000)
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(3, time.Hour), Cost: 1}); d.Allowed {
		t.Fatal("the raised window forgot the count")
	}
	ttl, err := client.PTTL(ctx, prefix+"{1:k}fixed_window/v0:s").Result()
	if err != nil || ttl < 59*time.Minute {
		t.Fatalf("TTL %s (%v), want the rest of the hour at least", ttl, err)
	}
}
