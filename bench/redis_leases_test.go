//go:build redisbench

package bench_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkRedisHotLeases: 128 goroutines on one hot key (GCRA 1e6/s,
// burst 1e6, never refused), sluice's redisstore without and with quota
// leases: decisions per second, the server's time and script calls per
// decision.
//
//	cd bench && go test -tags redisbench -run '^$' -bench RedisHotLeases -benchtime 3s .
func BenchmarkRedisHotLeases(b *testing.B) {
	for _, leases := range []bool{false, true} {
		name := "without"
		if leases {
			name = "with"
		}
		b.Run("leases="+name, func(b *testing.B) {
			e := startEnv(b, func(rdb *redis.Client) (allowFunc, func(), error) {
				allow, closer, err := newSluiceStore(rdb, sluiceGCRA, redisstore.Config{Prefix: redisPrefix + ":sluice:",
					Leases: redisstore.LeaseConfig{Enabled: leases}})
				hot := func(ctx context.Context, _ string) (bool, error) { return allow(ctx, "hot") }
				return hot, closer, err
			})
			denied, errs, first := runParallel(b, 128, e.allow)
			after, err := commandStats(context.Background(), e.admin)
			if err != nil {
				b.Fatal(err)
			}
			calls := after["fcall"].calls - e.before["fcall"].calls + after["evalsha"].calls - e.before["evalsha"].calls
			b.ReportMetric(float64(calls)/float64(b.N), "scripts/op")
			e.finish(b, denied, errs, first)
		})
	}
}
