package memstore

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
)

// BenchmarkTake times one decision on a key the store holds, called on the
// store itself (no Limiter in between), with the sweeper off so that
// nothing but the decisions runs: 1 key, or 100,000 picked at random;
// serially, and from b.RunParallel. bench/ compares the store with other
// libraries; this one is for profiles and instruction counts of the store
// alone.
func BenchmarkTake(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		for _, parallel := range []bool{false, true} {
			name := "keys=" + strconv.Itoa(n)
			if parallel {
				name += "/parallel"
			}
			b.Run(name, func(b *testing.B) { benchTake(b, n, parallel) })
		}
	}
}

func benchTake(b *testing.B, n int, parallel bool) {
	s := newStore(b, Config{MaxKeys: 1 << 18, SweepInterval: -1})
	lim := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(100_000+i)
		s.Take(ctx, sluice.Request{Key: strings.Clone(keys[i]), Limit: lim, Cost: 1})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	var seed atomic.Uint64
	loop := func(next func() bool) {
		x := 0x9e3779b97f4a7c15 * (seed.Add(1) | 1)
		for next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			d, _ := s.Take(ctx, sluice.Request{Key: keys[(x>>32)*uint64(n)>>32], Limit: lim, Cost: 1})
			if !d.Allowed {
				b.Error("refused")
				return
			}
		}
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
		return
	}
	i := 0
	loop(func() bool { i++; return i <= b.N })
}
