//go:build redisbench

package bench_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// BenchmarkRedisCluster128: sluice and ulule (the best peer on the
// standalone server) on a Redis Cluster, 128 goroutines over the same
// 10,000 keys, which spread over every master. REDISBENCH_CLUSTER names the
// cluster's nodes, comma-separated (scripts/redis up prints them as
// SLUICE_REDIS_CLUSTER). On a cluster the store merges only the calls of
// one slot into a batch script, so most decisions go as FCALLs of their
// own, pipelined per node.
func BenchmarkRedisCluster128(b *testing.B) {
	env := os.Getenv("REDISBENCH_CLUSTER")
	if env == "" {
		if os.Getenv("CI") != "" {
			b.Fatal("REDISBENCH_CLUSTER is not set: name the nodes of a Redis Cluster (scripts/redis up prints them)")
		}
		b.Skip("set REDISBENCH_CLUSTER to the addresses of a Redis Cluster's nodes")
	}
	addrs := strings.Split(env, ",")
	if 128%runtime.GOMAXPROCS(0) != 0 {
		b.Fatalf("GOMAXPROCS %d does not divide 128 goroutines", runtime.GOMAXPROCS(0))
	}
	libs := []struct {
		name string
		new  func(redis.UniversalClient) (allowFunc, func(), error)
	}{
		{"sluice-gcra", func(c redis.UniversalClient) (allowFunc, func(), error) {
			store, err := redisstore.New(c, redisstore.Config{Prefix: redisPrefix + ":sluice:"})
			if err != nil {
				return nil, nil, err
			}
			lim := sluice.New(store)
			return func(ctx context.Context, key string) (bool, error) {
				d, err := lim.Allow(ctx, key, sluiceGCRA)
				return d.Allowed, err
			}, func() { store.Close() }, nil
		}},
		{"ulule-fixed", func(c redis.UniversalClient) (allowFunc, func(), error) {
			store, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: redisPrefix + ":ulule", MaxRetry: ulule.DefaultMaxRetry})
			if err != nil {
				return nil, nil, err
			}
			lim := ulule.New(store, ulule.Rate{Period: window, Limit: windowCount})
			return func(ctx context.Context, key string) (bool, error) {
				c, err := lim.Get(ctx, key)
				if err != nil {
					return false, err
				}
				return !c.Reached, nil
			}, func() {}, nil
		}},
	}
	for _, lib := range libs {
		b.Run(lib.name, func(b *testing.B) {
			b.StopTimer()
			ctx := context.Background()
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			defer cc.Close()
			if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() }); err != nil {
				b.Fatalf("FLUSHALL on every master: %v", err)
			}
			allow, closer, err := lib.new(cc)
			if err != nil {
				b.Fatal(err)
			}
			defer closer()
			if b.N > 1 {
				warm(b, allow)
			}
			b.ResetTimer()
			b.StartTimer()
			denied, errs, first := runParallel(b, 128, allow)
			b.StopTimer()
			b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
			b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			if first != nil {
				b.Logf("first error: %v", first)
			}
		})
	}
}
