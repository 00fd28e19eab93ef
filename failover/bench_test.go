package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkTakeAnsweredAtOnce: what failover adds to a call its primary
// answers without waiting (a memstore here, as redisstore's near cache
// answers a known refusal): the breaker, the deadline, the warm fallback.
func BenchmarkTakeAnsweredAtOnce(b *testing.B) {
	primary, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer primary.Close()
	s, err := failover.New(primary, failover.Config{Mode: func(sluice.Request) failover.Mode { return failover.FailOpen }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := sluice.Request{Key: "hot", Limit: sluice.FixedWindow(1, time.Hour), Cost: 1}
	ctx := context.Background()
	s.Take(ctx, r)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Take(ctx, r); err != nil || d.Allowed {
			b.Fatal(d, err)
		}
	}
}
