package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAdjustConcurrent: goroutines reserve and settle on one key at once,
// on a standalone server and on a cluster; what the key records is exactly
// the sum of the actual costs.
func TestAdjustConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(testing.TB) redis.UniversalClient
	}{
		{"standalone", func(t testing.TB) redis.UniversalClient { return redistest.Standalone(t) }},
		{"cluster", func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := New(tc.client(t), Config{Prefix: redistest.Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l := sluice.FixedWindow(1_000_000, 24*time.Hour)
			key := "settle:" + time.Now().Format(time.RFC3339Nano)
			const workers, each = 8, 50
			sums := make([]int64, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 2))
					for range each {
						reserve, actual := rng.Int64N(100), rng.Int64N(100)
						if d, err := s.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: reserve}); err != nil || !d.Allowed {
							t.Errorf("take %d: %+v %v", reserve, d, err)
							return
						}
						if _, err := s.Adjust(ctx, sluice.Request{Key: key, Limit: l, Cost: actual - reserve}); err != nil {
							t.Errorf("adjust: %v", err)
							return
						}
						sums[w] += actual
					}
				})
			}
			wg.Wait()
			total := int64(0)
			for _, v := range sums {
				total += v
			}
			d, err := s.Adjust(ctx, sluice.Request{Key: key, Limit: l})
			if err != nil || d.Remaining != l.Count-total {
				t.Fatalf("remaining %d (%v), want %d: the settles did not add up", d.Remaining, err, l.Count-total)
			}
		})
	}
}

// TestAdjustNearCache: a refund forgets the key's remembered refusal, so
// the room it made is used at once; a charge into debt is remembered.
func TestAdjustNearCache(t *testing.T) {
	ctx := context.Background()
	at := time.UnixMicro(1_700_000_040_123_456)
	s, err := New(redistest.Standalone(t), Config{Prefix: redistest.Prefix(t), Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.TokenBucket(sluice.PerMinute(10), 10)
	r := sluice.Request{Key: "k", Limit: l, Cost: 10}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v %v", d, err)
	}
	if d, _ := s.Take(ctx, r); d.Allowed {
		t.Fatal("the bucket is empty: want a refusal")
	}
	if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Limit: l, Cost: -10}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("after a refund of the whole bucket: %+v %v, want admitted", d, err)
	}
	d, err := s.Adjust(ctx, sluice.Request{Key: "k", Limit: l, Cost: 5})
	if err != nil || d.Allowed {
		t.Fatalf("charge into debt: %+v %v", d, err)
	}
	var q request
	s.prepare(sluice.Request{Key: "k", Limit: l, Cost: 1}, &q)
	if _, ok := s.near.get(q.state, &l, 1, 0, s.localNow()); !ok {
		t.Fatal("a key charged into debt is not in the near cache")
	}
}

func TestAdjustErrors(t *testing.T) {
	ctx := context.Background()
	s, err := New(redistest.Standalone(t), Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Adjust(ctx, sluice.Request{Key: "k", Limit: sluice.Concurrency(3, time.Second), Cost: 1})
	if !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Errorf("concurrency: %v", err)
	}
	_, err = s.Adjust(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(3, time.Second), Cost: -13})
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Errorf("refund past capacity: %v", err)
	}
	_, err = s.Adjust(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(0, time.Second), Cost: 1})
	if !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("invalid limit: %v", err)
	}
}
