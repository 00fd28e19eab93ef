package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkNearCacheHit: what redisstore spends on a request its near
// cache refuses (prepare, keys, the cache), with no round trip: the
// over-limit key of a retry storm.
func BenchmarkNearCacheHit(b *testing.B) {
	s, err := New(cannedClient{}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := sluice.Request{Key: "hot:12345", Limit: sluice.FixedWindow(1, time.Hour), Cost: 1}
	var q request
	err = s.prepare(r, &q)
	if err != nil {
		b.Fatal(err)
	}
	s.near.put(q.state, &r.Limit, 1, 0, sluice.Decision{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}, s.localNow())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := s.Take(ctx, r); err != nil || d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}
