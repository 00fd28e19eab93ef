package memstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkTakeFixedClock: one key, token bucket, a fixed Config.Now (no
// clock goroutine), for instruction counts that do not depend on load.
func BenchmarkTakeFixedClock(b *testing.B) {
	at := time.Unix(1_700_000_000, 0)
	s := newStore(b, Config{Now: func() time.Time { return at }, SweepInterval: -1})
	lim := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
	r := sluice.Request{Key: "user:100000", Limit: lim, Cost: 1}
	s.Take(ctx, r)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Take(ctx, r)
	}
}
