package bench

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestMemoryPerKey reports the live heap each library holds per key after
// manyKeys keys have been used under the strict policy (so no key returns
// to its fresh state and none is swept), and for sluice's sliding_log after
// 10 requests per key at distinct microseconds. Keys are 11 bytes long
// ("user:123456"). Run it with -v to see the figures.
func TestMemoryPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of MB")
	}
	type memCase struct {
		name     string
		new      func() (limiter, error)
		requests int
	}
	var cases []memCase
	for _, lib := range libraries {
		cases = append(cases, memCase{lib.name, func() (limiter, error) { return lib.new(strict, maxKeys) }, 1})
	}
	cases = append(cases, memCase{"sluice-sliding_log", func() (limiter, error) {
		// A clock that advances 1µs per reading, so that each request
		// gets its own log record instead of sharing a microsecond.
		t0 := time.Now()
		var ticks atomic.Int64
		now := func() time.Time { return t0.Add(time.Duration(ticks.Add(1)) * time.Microsecond) }
		return newSluice(sluice.SlidingLog(10, window), memstore.Config{MaxKeys: maxKeys, Now: now})
	}, 10})

	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := liveHeap()
			lim, err := c.new()
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			for _, key := range keys100k {
				for i := range c.requests {
					// A fresh copy, as a key parsed from a request would
					// be: a library that keeps the caller's string retains
					// its bytes, one that copies it does not.
					if ok, err := lim.Allow(ctx, strings.Clone(key)); err != nil || !ok {
						t.Fatalf("request %d on %s: allowed %t, error %v", i, key, ok, err)
					}
				}
			}
			after := liveHeap()
			runtime.KeepAlive(lim)
			perKey := float64(int64(after)-int64(before)) / manyKeys
			t.Logf("%-18s %3d request(s)/key: %6.0f bytes/key", c.name, c.requests, perKey)
		})
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
