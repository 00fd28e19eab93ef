// Command quickstart shows, in one screen, how each sluice algorithm treats
// the same traffic: a burst, then a steady overload, then a pause. Each row
// is one algorithm, each column 50 ms; a column shows how many of that
// slot's requests were admitted (0-9), with '+' for ten or more.
//
//	go run ./examples/quickstart
//
// It runs on a simulated clock, so it finishes at once and prints the same
// picture every time.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/draw"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	const slot = 50 * time.Millisecond
	// Requests arriving in each 50 ms slot: a burst of 30, then 2 per slot
	// (40/s) for two seconds, then nothing for half a second, then 40/s again.
	var arrivals []int
	arrivals = append(arrivals, 30)
	for range 39 {
		arrivals = append(arrivals, 2)
	}
	for range 10 {
		arrivals = append(arrivals, 0)
	}
	for range 20 {
		arrivals = append(arrivals, 2)
	}

	limits := []sluice.Limit{
		sluice.FixedWindow(10, time.Second),
		sluice.SlidingLog(10, time.Second),
		sluice.SlidingWindow(10, time.Second),
		sluice.TokenBucket(sluice.PerSecond(10), 10),
		sluice.GCRA(sluice.PerSecond(10), 10),
		sluice.LeakyBucket(sluice.PerSecond(10), 10),
		sluice.WarmUp(sluice.PerSecond(10), 2*time.Second),
	}
	fmt.Printf("%-40s %s\n", "arrivals per 50ms slot", draw.Row(arrivals))
	for _, lim := range limits {
		fmt.Printf("%-40s %s   %d admitted\n", lim, simulate(lim, arrivals, slot), total(lim, arrivals, slot))
	}
	fmt.Println("\nEach limit allows 10 per second; 40 per second arrive. Fixed windows let")
	fmt.Println("bursts through at each boundary; the buckets pass a burst then meter;")
	fmt.Println("the leaky bucket admits with a delay; warm-up starts slow.")
}

// run feeds the arrivals through a memstore on a simulated clock and returns
// the number admitted in each slot.
func run(lim sluice.Limit, arrivals []int, slot time.Duration) []int {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter := sluice.New(store)
	admitted := make([]int, len(arrivals))
	for i, n := range arrivals {
		for j := range n {
			now = now.Add(slot / time.Duration(n) * time.Duration(min(j, 1)))
			d, err := limiter.Allow(context.Background(), "demo", lim)
			if err != nil {
				panic(err)
			}
			if d.Allowed {
				admitted[i]++
			}
		}
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i+1) * slot)
	}
	return admitted
}

func simulate(lim sluice.Limit, arrivals []int, slot time.Duration) string {
	return draw.Row(run(lim, arrivals, slot))
}

func total(lim sluice.Limit, arrivals []int, slot time.Duration) int {
	sum := 0
	for _, n := range run(lim, arrivals, slot) {
		sum += n
	}
	return sum
}
