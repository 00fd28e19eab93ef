package memstore

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestAdjustConcurrent: many goroutines reserve and settle on one key at
// once; what the key records is exactly the sum of the actual costs.
func TestAdjustConcurrent(t *testing.T) {
	c := newClock()
	s := newStore(t, Config{Now: c.now})
	l := sluice.FixedWindow(1_000_000, time.Hour)
	const workers, each = 8, 300
	var wg sync.WaitGroup
	sums := make([]int64, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range each {
				reserve, actual := rng.Int64N(100), rng.Int64N(100)
				d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: reserve})
				if err != nil || !d.Allowed {
					t.Errorf("take %d: %+v %v", reserve, d, err)
					return
				}
				if _, err := s.Adjust(ctx, sluice.Request{Key: "k", Limit: l, Cost: actual - reserve}); err != nil {
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
	d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l})
	if err != nil || d.Remaining != l.Count-total {
		t.Fatalf("remaining %d (%v), want %d: the settles did not add up", d.Remaining, err, l.Count-total)
	}
}

func TestAdjustKeys(t *testing.T) {
	c := newClock()
	s := newStore(t, Config{Now: c.now})
	l := sluice.TokenBucket(sluice.PerSecond(10), 10)
	// A refund to a key the store does not hold creates nothing.
	if d, err := s.Adjust(ctx, sluice.Request{Key: "new", Limit: l, Cost: -5}); err != nil || d.Remaining != 10 || s.Len() != 0 {
		t.Fatalf("refund to a new key: %+v %v, %d keys", d, err, s.Len())
	}
	// A charge creates it, into debt.
	d, err := s.Adjust(ctx, sluice.Request{Key: "new", Limit: l, Cost: 10})
	if err != nil || d.Allowed || s.Len() != 1 {
		t.Fatalf("charge to a new key: %+v %v, %d keys", d, err, s.Len())
	}
	d, _ = s.Adjust(ctx, sluice.Request{Key: "new", Limit: l, Cost: 5})
	if d.Allowed || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("in debt: %+v, want a refusal for 600ms", d)
	}
	_, err = s.Adjust(ctx, sluice.Request{Key: "new", Limit: l, Cost: 41})
	if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("delta past capacity: %v", err)
	}
	_, err = s.Adjust(ctx, sluice.Request{Key: "c", Limit: sluice.Concurrency(2, time.Second), Cost: 1})
	if !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Fatalf("concurrency: %v", err)
	}
	s.Close()
	if _, err := s.Adjust(ctx, sluice.Request{Key: "new", Limit: l, Cost: 1}); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}
