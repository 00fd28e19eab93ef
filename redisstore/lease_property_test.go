package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"pgregory.net/rapid"
)

// TestLeaseBoundProperty: on a fake clock, three instances with leases
// take random costs at random times from one key. After every decision the
// units admitted and those held in leases together never exceed what the
// limit could have handed out since the key was fresh, no instance holds
// more than Capacity/Share, and, once every give-back has reached Redis,
// no unit is made from nothing: what Redis still has, what was admitted and
// what is held add up to at most that bound (for a fixed window exactly
// to it: its count is the units admitted and held).
func TestLeaseBoundProperty(t *testing.T) {
	const start = 1_800_000_000_000_000 // µs, on an hour boundary
	var clock atomic.Int64
	clock.Store(start)
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	prefix := redistest.Prefix(t)
	const share = 4
	var stores [3]*redisstore.Store
	for i := range stores {
		stores[i] = newStore(t, redistest.Standalone(t), redisstore.Config{Prefix: prefix, Now: now,
			Leases: redisstore.LeaseConfig{Enabled: true, Share: share, Traffic: 20 * time.Millisecond, Hold: 60 * time.Millisecond}})
	}
	bucket := func(t0, t1 int64) int64 { return 64 + (t1-t0)/1000 } // 1000/s, burst 64
	cases := []struct {
		lim   sluice.Limit
		bound func(t0, t1 int64) int64
		exact bool
	}{
		{sluice.TokenBucket(sluice.PerSecond(1000), 64), bucket, false},
		{sluice.GCRA(sluice.PerSecond(1000), 64), bucket, false},
		{sluice.FixedWindow(64, time.Hour), func(int64, int64) int64 { return 64 }, true},
	}
	var iter atomic.Int64
	for _, tc := range cases {
		t.Run(tc.lim.Algorithm.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				key := "k" + strconv.FormatInt(iter.Add(1), 10)
				t0 := clock.Load()
				var admitted int64
				for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
					clock.Add(rapid.Int64Range(0, 15_000).Draw(rt, "advance µs"))
					s := stores[rapid.IntRange(0, 2).Draw(rt, "instance")]
					cost := rapid.Int64Range(1, 4).Draw(rt, "cost")
					d, err := s.Take(ctx, sluice.Request{Key: key, Limit: tc.lim, Cost: cost})
					if err != nil {
						rt.Fatal(err)
					}
					if d.Allowed {
						admitted += cost
					}
					var held int64
					for _, s := range stores {
						h := redisstore.HeldFor(s, key, tc.lim)
						if h > tc.lim.Capacity()/share {
							rt.Fatalf("step %d: an instance holds %d, above Capacity/Share = %d", step, h, tc.lim.Capacity()/share)
						}
						held += h
					}
					if b := tc.bound(t0, clock.Load()); admitted+held > b {
						rt.Fatalf("step %d: admitted %d + held %d, above the bound %d", step, admitted, held, b)
					}
				}
				checkConserved(rt, stores[:], key, tc.lim, admitted, tc.bound(t0, clock.Load()), tc.exact)
			})
		})
	}
}

// checkConserved checks, once every give-back has reached Redis, that the
// room Redis reports, the units admitted and those held add up to at most
// bound (exactly to it when exact).
func checkConserved(rt *rapid.T, stores []*redisstore.Store, key string, lim sluice.Limit, admitted, bound int64, exact bool) {
	var held int64
	for _, s := range stores {
		redisstore.SettleLeases(s)
		held += redisstore.HeldFor(s, key, lim)
	}
	peek, err := stores[0].Take(ctx, sluice.Request{Key: key, Limit: lim})
	if err != nil {
		rt.Fatal(err)
	}
	sum := peek.Remaining + admitted + held
	if sum > bound || exact && sum != bound {
		rt.Fatalf("Redis has %d, admitted %d, held %d: %d in all, bound %d (exact: %v)", peek.Remaining, admitted, held, sum, bound, exact)
	}
}
