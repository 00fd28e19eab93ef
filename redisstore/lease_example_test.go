package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// With quota leases, a hot limit costs Redis a script call per lease, a
// few dozen requests, instead of one per request; the fleet still never
// admits more than the limit. (Compiled, not run: it needs a Redis server.)
func ExampleLeaseConfig() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.New(client, redisstore.Config{
		Leases: redisstore.LeaseConfig{
			Enabled: true,
			Share:   32,                     // a lease is at most 1/32 of a limit's burst
			Hold:    100 * time.Millisecond, // unspent units go back to Redis after 100ms
		},
	})
	if err != nil {
		panic(err)
	}
	defer store.Close() // gives back what the leases hold
	limiter := sluice.New(store)
	d, err := limiter.Allow(context.Background(), "checkout", sluice.TokenBucket(sluice.PerSecond(5000), 5000))
	if err != nil {
		fmt.Println("limiter error:", err)
		return
	}
	fmt.Println(d.Allowed)
}

// While Redis cannot be reached, an instance can still admit what its
// leases hold: Redis counted those units when it handed them out. Package
// failover does this by itself before its fallback.
func ExampleStore_TakeHeld() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, _ := redisstore.New(client, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	defer store.Close()
	rs := []sluice.Request{{Key: "checkout", Limit: sluice.TokenBucket(sluice.PerSecond(5000), 5000), Cost: 1}}
	ds := make([]sluice.Decision, len(rs))
	if store.TakeHeld(rs, ds) {
		fmt.Println("admitted from the lease:", ds[0].Allowed)
	} else {
		fmt.Println("not covered by what this instance holds")
	}
}

// An operator's view of the leases: what they saved, and what this
// instance would lose if it died now beside the bound on it. sluice serve
// exports the same as the sluice_lease_* metrics.
func ExampleStore_LeaseStats() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, _ := redisstore.New(client, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	defer store.Close()
	st := store.LeaseStats()
	fmt.Printf("%d checks without a call, %d lease calls; holding %d units (bound %d) on %d keys\n",
		st.Local, st.Calls, st.Held, st.Bound, st.Keys)
}
