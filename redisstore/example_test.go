package redisstore_test

import (
	"context"
	"fmt"
	"strings"

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

// On a Redis Cluster, a SlotKey that gives every dimension of a route the
// same slot makes a composite check one atomic script.
func ExampleConfig_slotKey() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}})
	store, _ := redisstore.New(client, redisstore.Config{
		SlotKey: func(key string) string {
			route, _, _ := strings.Cut(key, "|") // "POST /orders|user:42" -> "POST /orders"
			return route
		},
	})
	defer store.Close()
	limiter := sluice.New(store)
	limiter.Check(context.Background(),
		sluice.Request{Key: "POST /orders|global", Limit: sluice.TokenBucket(sluice.PerSecond(5000), 5000), Cost: 1},
		sluice.Request{Key: "POST /orders|user:42", Limit: sluice.TokenBucket(sluice.PerSecond(10), 20), Cost: 1},
	)
}
