package memstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkAdjustFixedClock: one key, token bucket, a charge and a refund
// of one unit in turn, a fixed Config.Now: the path of a settle.
func BenchmarkAdjustFixedClock(b *testing.B) {
	at := time.Unix(1_700_000_000, 0)
	s := newStore(b, Config{Now: func() time.Time { return at }, SweepInterval: -1})
	lim := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
	r := sluice.Request{Key: "user:100000", Limit: lim, Cost: 1}
	s.Take(ctx, r)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r.Cost = int64(1 - 2*(i&1))
		s.Adjust(ctx, r)
	}
}
