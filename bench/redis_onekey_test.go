//go:build redisbench

package bench_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// oneKeyLibs are the libraries BenchmarkRedisOneKey runs: sluice and the
// two fastest peers of BenchmarkRedisSerial.
var oneKeyLibs = []string{"sluice-gcra", "redis_rate-gcra", "ulule-fixed"}

// BenchmarkRedisOneKey: every decision on one key, from one goroutine
// (serial: ns/op is a decision's latency, srv-µs/op the server's time per
// decision from INFO commandstats) and from 64 (hot: decisions/s), each
// library under the limit of BenchmarkRedisSerial (never refused).
//
//	cd bench && go test -tags redisbench -run '^$' -bench RedisOneKey -count 5 .
func BenchmarkRedisOneKey(b *testing.B) {
	for _, mode := range []struct {
		name       string
		goroutines int
	}{{"serial", 1}, {"hot64", 64}} {
		for _, lib := range redisLibs {
			if !oneOf(lib.name, oneKeyLibs) {
				continue
			}
			b.Run(mode.name+"/"+lib.name, func(b *testing.B) {
				e := startEnv(b, func(rdb *redis.Client) (allowFunc, func(), error) {
					allow, closer, err := lib.new(rdb)
					one := func(ctx context.Context, _ string) (bool, error) { return allow(ctx, "one") }
					return one, closer, err
				})
				if mode.goroutines == 1 {
					ctx := context.Background()
					var denied, errs int64
					var first errOnce
					for range b.N {
						ok, err := e.allow(ctx, "")
						switch {
						case err != nil:
							errs++
							first.set(err)
						case !ok:
							denied++
						}
					}
					e.finish(b, denied, errs, first.err)
					return
				}
				denied, errs, first := runParallel(b, mode.goroutines, e.allow)
				e.finish(b, denied, errs, first)
			})
		}
	}
}

func oneOf(s string, list []string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
