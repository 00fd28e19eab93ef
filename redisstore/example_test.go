package redisstore_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Every instance of a service builds its limiter on the same Redis; they then
// share every limit. (Compiled, not run: it needs a Redis server.)
func ExampleNew() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: []string{"127.0.0.1:6379"}, // several addresses: a Cluster
	})
	store, err := redisstore.New(client, redisstore.Config{Prefix: "myapp:rl:"})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter := sluice.New(store)

	d, err := limiter.Allow(context.Background(), "user:42", sluice.GCRA(sluice.PerSecond(10), 20))
	if err != nil {
		// Redis is unreachable: decide whether to fail open or closed.
		fmt.Println("limiter error:", err)
		return
	}
	fmt.Println(d.Allowed)
}

// On a Redis Cluster, with Config.Slots, requests that name one Slot share
// a hash slot: giving every dimension of a route the route's name as its
// Slot makes a composite check one atomic script.
func ExampleConfig_slots() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}})
	store, _ := redisstore.New(client, redisstore.Config{Slots: true})
	defer store.Close()
	limiter := sluice.New(store)
	limiter.Check(context.Background(),
		sluice.Request{Key: "POST /orders|global", Slot: "POST /orders", Limit: sluice.TokenBucket(sluice.PerSecond(5000), 5000), Cost: 1},
		sluice.Request{Key: "POST /orders|user:42", Slot: "POST /orders", Limit: sluice.TokenBucket(sluice.PerSecond(10), 20), Cost: 1},
	)
}
