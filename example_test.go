package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A limiter keeps its state in a store: memstore in one process, redisstore
// for a fleet. Each call names the key and the limit.
func Example() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)

	perUser := sluice.TokenBucket(sluice.PerSecond(1), 3) // bursts of 3, then 1 per second
	for i := 0; i < 4; i++ {
		d, err := limiter.Allow(context.Background(), "user:42", perUser)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("request %d: allowed, %d left\n", i, d.Remaining)
		} else {
			fmt.Printf("request %d: refused, retry in %s\n", i, d.RetryAfter.Round(time.Second))
		}
	}
	// Output:
	// request 0: allowed, 2 left
	// request 1: allowed, 1 left
	// request 2: allowed, 0 left
	// request 3: refused, retry in 1s
}

func ExampleLimiter_AllowN() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	quota := sluice.FixedWindow(100, time.Hour) // 100 units of work per hour

	d, _ := limiter.AllowN(context.Background(), "tenant:acme", quota, 60) // a heavy request
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(context.Background(), "tenant:acme", quota, 60)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(context.Background(), "tenant:acme", quota, 0) // peek: charges nothing
	fmt.Println(d.Allowed, d.Remaining)
	_, err := limiter.AllowN(context.Background(), "tenant:acme", quota, 500)
	fmt.Println(errors.Is(err, sluice.ErrCostExceedsCapacity))
	// Output:
	// true 40
	// false 40
	// true 40
	// true
}

// Check limits one request on several dimensions at once. If any refuses,
// none is charged.
func ExampleLimiter_Check() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	ctx := context.Background()

	global := sluice.GCRA(sluice.PerHour(5000), 5000) // refills slowly enough to print exact numbers
	perIP := sluice.SlidingWindow(2, time.Minute)
	for i := 0; i < 3; i++ {
		d, _ := limiter.Check(ctx,
			sluice.Request{Key: "global", Limit: global, Cost: 1},
			sluice.Request{Key: "ip:203.0.113.7", Limit: perIP, Cost: 1},
		)
		fmt.Printf("allowed=%v limit=%d remaining=%d\n", d.Allowed, d.Limit, d.Remaining)
	}
	g, _ := limiter.AllowN(ctx, "global", global, 0)
	fmt.Println("global remaining:", g.Remaining)
	// Output:
	// allowed=true limit=2 remaining=1
	// allowed=true limit=2 remaining=0
	// allowed=false limit=2 remaining=0
	// global remaining: 4998
}

// Wait blocks until the request is admitted, or refuses at once if that
// would take longer than the context allows.
func ExampleLimiter_Wait() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	lim := sluice.TokenBucket(sluice.PerSecond(1), 1)

	limiter.Allow(context.Background(), "export", lim) // take the only token
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := limiter.Wait(ctx, "export", lim) // the next token is ~1s away
	fmt.Println(errors.Is(err, sluice.ErrWouldExceedDeadline))
	// Output: true
}

// A concurrency limit hands out leases; give each back when the work ends.
func ExampleLimiter_Release() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	ctx := context.Background()
	reports := sluice.Concurrency(2, time.Minute) // at most 2 reports at once

	a, _ := limiter.Allow(ctx, "reports", reports)
	b, _ := limiter.Allow(ctx, "reports", reports)
	c, _ := limiter.Allow(ctx, "reports", reports)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed)
	limiter.Release(ctx, sluice.Request{Key: "reports", Limit: reports}, a.Lease)
	d, _ := limiter.Allow(ctx, "reports", reports)
	fmt.Println(d.Allowed)
	// Output:
	// true true false
	// true
}

func ExampleLimit_Validate() {
	err := sluice.TokenBucket(sluice.PerSecond(100), 0).Validate()
	fmt.Println(err)
	// Output: sluice: invalid limit: token_bucket: burst must be at least 1 (got 0)
}

func ExampleLimit_String() {
	fmt.Println(sluice.TokenBucket(sluice.PerSecond(100), 20))
	fmt.Println(sluice.SlidingWindow(1000, time.Hour))
	fmt.Println(sluice.LeakyBucket(sluice.PerSecond(10), 20).WithNoDelay(5))
	fmt.Println(sluice.WarmUp(sluice.PerSecond(5), 3*time.Second))
	// Output:
	// token_bucket(100/s, burst 20)
	// sliding_window(1000 per 1h)
	// leaky_bucket(10/s, queue 20, nodelay 5)
	// warm_up(5/s, warm-up 3s)
}

// A leaky bucket shapes instead of refusing: it admits with a Delay so that
// requests leave at a constant rate.
func ExampleLeakyBucket() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	lim := sluice.LeakyBucket(sluice.PerSecond(10), 2) // 100ms apart, 2 may wait

	for i := 0; i < 4; i++ {
		d, _ := limiter.Allow(context.Background(), "smtp", lim)
		fmt.Printf("allowed=%v delay=%s\n", d.Allowed, d.Delay.Round(10*time.Millisecond))
	}
	// Output:
	// allowed=true delay=0s
	// allowed=true delay=100ms
	// allowed=true delay=200ms
	// allowed=false delay=0s
}

// A calendar window counts per calendar day, week, month or year of a time
// zone: here 2 requests per month in Berlin, so a request on 31 January at
// 23:59:58 Berlin time waits 2 seconds for February.
func ExampleCalendarWindow() {
	now := time.Date(2026, 1, 31, 22, 59, 58, 0, time.UTC) // 23:59:58 in Berlin
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	defer store.Close()
	limiter := sluice.New(store)

	monthly := sluice.CalendarWindow(2, sluice.Month, "Europe/Berlin")
	fmt.Println(monthly)
	for i := 0; i < 3; i++ {
		d, _ := limiter.Allow(context.Background(), "customer:7", monthly)
		fmt.Printf("allowed %v, %d left, reset in %s\n", d.Allowed, d.Remaining, d.ResetAfter)
	}
	now = now.Add(2 * time.Second) // 1 February, midnight in Berlin
	d, _ := limiter.Allow(context.Background(), "customer:7", monthly)
	fmt.Printf("allowed %v, %d left, reset in %s\n", d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// fixed_window(2 per month in Europe/Berlin)
	// allowed true, 1 left, reset in 2s
	// allowed true, 0 left, reset in 2s
	// allowed false, 0 left, reset in 2s
	// allowed true, 1 left, reset in 672h0m0s
}

// A middleware marks the entry its calls came through; a limit on a shared
// resource further in reads it, to count only the calls of that entry.
func ExampleWithEntry() {
	ctx := sluice.WithEntry(context.Background(), "checkout")
	fmt.Println(sluice.EntryFrom(ctx))
	fmt.Printf("%q\n", sluice.EntryFrom(context.Background()))
	// Output:
	// checkout
	// ""
}
