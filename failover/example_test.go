package failover_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// A store that has failed (here a closed memstore stands in for a Redis
// that is down) opens the breaker after two failures; from then on the
// fallback decides, at half the limit, without calling the primary.
func Example() {
	primary, _ := memstore.New(memstore.Config{})
	primary.Close() // every call fails from now on

	store, _ := failover.New(primary, failover.Config{
		ConsecutiveFailures: 2,
		Mode:                func(sluice.Request) failover.Mode { return failover.Fallback },
		FallbackScale:       0.5,
		OnStateChange:       func(from, to failover.State) { fmt.Println("breaker:", from, "->", to) },
		Logger:              slog.New(slog.DiscardHandler),
	})
	defer store.Close()
	limiter := sluice.New(store)

	for i := range 4 {
		d, err := limiter.Allow(context.Background(), "user:42", sluice.FixedWindow(4, time.Hour))
		fmt.Println(i, d.Allowed, d.Degraded, d.Limit, err)
	}
	st := store.Stats()
	fmt.Println("calls", st.Calls, "short-circuited", st.ShortCircuited, "fallback", st.DegradedFallback)
	// Output:
	// 0 true true 2 <nil>
	// breaker: closed -> open
	// 1 true true 2 <nil>
	// 2 false true 2 <nil>
	// 3 false true 2 <nil>
	// calls 2 short-circuited 2 fallback 4
}

// ParseMode reads the names policy files use for on_error.
func ExampleParseMode() {
	for _, s := range []string{"open", "closed", "fallback", "half"} {
		m, err := failover.ParseMode(s)
		fmt.Println(m, err)
	}
	// Output:
	// open <nil>
	// closed <nil>
	// fallback <nil>
	// default failover: unknown mode "half" (want open, closed or fallback)
}
