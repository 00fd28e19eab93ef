package memstore

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestBytesPerKey measures the live heap each (key, limit) state costs, per
// algorithm, with 15-byte keys ("203.000.113.007"-like, as an IPv4 key) and
// one request per key, and checks it against the ceilings documented in
// docs/operations.md. Run it with -v to see the figures:
//
//	go test -run TestBytesPerKey -v ./memstore
func TestBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of MB")
	}
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%03d.%03d.%03d", i>>16&255, i>>8&255, i&255)
	}
	for _, tc := range []struct {
		lim     sluice.Limit
		ceiling float64 // bytes per key
	}{
		{sluice.FixedWindow(100, time.Minute), 200},
		{sluice.SlidingWindow(100, time.Minute), 200},
		{sluice.SlidingLog(100, time.Minute), 250}, // one logged request
		{sluice.TokenBucket(sluice.PerSecond(10), 100), 200},
		{sluice.GCRA(sluice.PerSecond(10), 100), 200},
		{sluice.LeakyBucket(sluice.PerSecond(10), 100), 200},
		{sluice.WarmUp(sluice.PerSecond(10), time.Minute), 200},
		{sluice.Concurrency(100, time.Minute), 250}, // one lease held
	} {
		t.Run(tc.lim.Algorithm.String(), func(t *testing.T) {
			clk := newClock()
			before := liveHeap()
			s, err := New(Config{MaxKeys: 2 * n, Now: clk.now, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				// A fresh copy, as a key read from a request is.
				if d, err := s.Take(ctx, sluice.Request{Key: strings.Clone(k), Limit: tc.lim, Cost: 1}); err != nil || !d.Allowed {
					t.Fatalf("%s: %+v %v", k, d, err)
				}
			}
			after := liveHeap()
			if s.Len() != n {
				t.Fatalf("holds %d keys, want %d", s.Len(), n)
			}
			runtime.KeepAlive(s)
			s.Close()
			per := float64(int64(after)-int64(before)) / n
			t.Logf("%-15s %4.0f bytes/key", tc.lim.Algorithm, per)
			if per > tc.ceiling && !raceEnabled {
				t.Errorf("%s: %.0f bytes per key, more than the documented %.0f", tc.lim.Algorithm, per, tc.ceiling)
			}
		})
	}
}

// liveHeap returns the bytes of live heap objects after full collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestEvictedKeyStartsFresh states what eviction costs the guarantee: a key
// that is not used while more distinct keys than MaxKeys pass through its
// shard is forgotten and starts fresh, so a client that can both exhaust its
// own key and spray enough other keys gets a second allowance. With
// MaxKeys above the distinct keys seen within a limit's window, nothing is
// evicted and the limit holds.
func TestEvictedKeyStartsFresh(t *testing.T) {
	lim := sluice.FixedWindow(1, time.Hour)
	for _, tc := range []struct {
		maxKeys, spray int
		readmitted     bool
	}{
		{64, 1_000, true},      // the spray exceeds the budget: the victim is evicted
		{10_000, 1_000, false}, // the budget holds the spray: it is not
	} {
		clk := newClock()
		s := newStore(t, Config{MaxKeys: tc.maxKeys, Shards: 4, Now: clk.now, SweepInterval: -1})
		take := func(key string) bool {
			d, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			return d.Allowed
		}
		if !take("victim") || take("victim") {
			t.Fatal("a limit of 1 did not admit exactly once")
		}
		for i := range tc.spray {
			take(fmt.Sprint("spray-", i))
		}
		if got := take("victim"); got != tc.readmitted {
			t.Errorf("MaxKeys %d, %d keys sprayed: victim readmitted %t, want %t", tc.maxKeys, tc.spray, got, tc.readmitted)
		}
	}
}
