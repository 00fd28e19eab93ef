package memstore

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// BenchmarkTake times one decision on a key the store holds, called on the
// store itself (no Limiter in between), serially, with the sweeper off so
// that nothing but the decisions runs: 1 key, or 100,000 picked at random.
// bench/ compares the store with other libraries; this one is for profiles
// and instruction counts of the store alone.
func BenchmarkTake(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
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
			x := uint64(0x9e3779b97f4a7c15)
			for range b.N {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				d, _ := s.Take(ctx, sluice.Request{Key: keys[(x>>32)*uint64(n)>>32], Limit: lim, Cost: 1})
				if !d.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}
