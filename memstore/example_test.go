package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func ExampleNew() {
	store, err := memstore.New(memstore.Config{
		MaxKeys: 1_000_000, // about 165 MB at most with short keys; the default is 100,000
	})
	if err != nil {
		panic(err)
	}
	defer store.Close() // stops the background sweeper

	limiter := sluice.New(store)
	d, _ := limiter.Allow(context.Background(), "ip:198.51.100.4", sluice.SlidingWindow(60, time.Minute))
	fmt.Println(d.Allowed, d.Limit, d.Remaining)
	// Output: true 60 59
}
