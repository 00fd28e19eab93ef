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

// A request its lease covers, or a refusal the near cache remembers, is
// decided without a round trip. Package failover asks this first, outside
// its breaker, and goes on asking while Redis cannot be reached: Redis
// counted the units of a lease when it handed them out.
func ExampleStore_TakeLocal() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, _ := redisstore.New(client, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	defer store.Close()
	r := sluice.Request{Key: "checkout", Limit: sluice.TokenBucket(sluice.PerSecond(5000), 5000), Cost: 1}
	var p redisstore.Prepared
	if d, ok := store.TakeLocal(r, &p); ok {
		fmt.Println("decided in the process:", d.Allowed)
		return
	}
	// Not covered by what this instance holds: Redis decides it, as
	// prepared.
	d, err := p.Take(context.Background())
	fmt.Println(d.Allowed, err)
}

// A check of several limits is decided locally only all together: every
// request covered by its lease, or one refusal remembered.
func ExampleStore_TakeAllLocal() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, _ := redisstore.New(client, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	defer store.Close()
	rs := []sluice.Request{
		{Key: "global", Limit: sluice.TokenBucket(sluice.PerSecond(5000), 5000), Cost: 1},
		{Key: "user:42", Limit: sluice.GCRA(sluice.PerSecond(10), 20), Cost: 1},
	}
	ds := make([]sluice.Decision, len(rs))
	var p redisstore.Prepared
	if store.TakeAllLocal(rs, ds, &p) {
		fmt.Println("decided in the process:", ds[0].Allowed && ds[1].Allowed)
	} else if err := p.TakeAll(context.Background(), ds); err == nil {
		fmt.Println("decided by Redis:", ds[0].Allowed && ds[1].Allowed)
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
