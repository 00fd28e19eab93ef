package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// takeOnly is a Store that cannot adjust.
type takeOnly struct{ sluice.Store }

func TestAdjustNeedsAnAdjuster(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.New(takeOnly{s})
	_, err = l.Adjust(context.Background(), sluice.Request{Key: "k", Limit: sluice.FixedWindow(3, 60e9), Cost: 1})
	if !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Fatalf("got %v, want ErrNotAdjustable", err)
	}
}

func TestSettleRefusesNegativeCosts(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.New(s)
	for _, c := range [][2]int64{{-1, 0}, {0, -1}} {
		_, err := l.Settle(context.Background(), "k", sluice.FixedWindow(3, 60e9), c[0], c[1])
		var le *sluice.LimitError
		if !errors.Is(err, sluice.ErrNegativeCost) || !errors.As(err, &le) || le.Field != "cost" {
			t.Errorf("Settle(%d, %d): got %v, want a cost error", c[0], c[1], err)
		}
	}
}

// Reserve an estimate, do the work, settle what it cost: an overrun is
// charged into debt and the next request waits for it.
func ExampleLimiter_Settle() {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return at }}) // a still clock, for the output
	defer store.Close()
	limiter := sluice.New(store)
	ctx := context.Background()
	budget := sluice.TokenBucket(sluice.PerMinute(10_000), 10_000) // tokens per user

	d, _ := limiter.AllowN(ctx, "user:42", budget, 1_000) // reserve an estimate
	fmt.Println("admitted:", d.Allowed)
	// ... the work used 9,500 tokens
	d, _ = limiter.Settle(ctx, "user:42", budget, 1_000, 9_500)
	fmt.Println("remaining after settle:", d.Remaining)
	d, _ = limiter.AllowN(ctx, "user:42", budget, 1_000)
	fmt.Println("next reservation admitted:", d.Allowed)
	// Output:
	// admitted: true
	// remaining after settle: 500
	// next reservation admitted: false
}

// A request reserved 5 of a window of 10 and used 2: Adjust refunds the
// other 3. A refund never leaves more room than the limit holds.
func ExampleLimiter_Adjust() {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return at }})
	defer store.Close()
	limiter := sluice.New(store)
	ctx := context.Background()
	queries := sluice.FixedWindow(10, time.Minute)

	limiter.AllowN(ctx, "tenant:7", queries, 5)
	d, _ := limiter.Adjust(ctx, sluice.Request{Key: "tenant:7", Limit: queries, Cost: -3})
	fmt.Println("remaining:", d.Remaining)
	d, _ = limiter.Adjust(ctx, sluice.Request{Key: "tenant:7", Limit: queries, Cost: -10})
	fmt.Println("after refunding more than was charged:", d.Remaining)
	fmt.Println("largest adjustment:", queries.MaxAdjust())
	// Output:
	// remaining: 8
	// after refunding more than was charged: 10
	// largest adjustment: 40
}
