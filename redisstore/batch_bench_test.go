package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkTakeManyKeys: 64 callers, every decision a new key, on a real
// Redis, as sluice serve's many-keys load drives the store. Besides the
// wall time per decision it reports this process's CPU per decision
// (cpu-µs/op: the store, the batcher and go-redis; Redis runs apart) and
// the round trips the batcher made per decision (trips/op). Each call has
// a deadline, as failover gives it one.
func BenchmarkTakeManyKeys(b *testing.B) {
	s, err := New(redistest.Standalone(b), Config{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim := sluice.TokenBucket(sluice.PerHour(1e9), 1e9)
	var next atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 callers: RunParallel multiplies by GOMAXPROCS
	b.ReportAllocs()
	cpu0, trips0 := cpuTime(), s.batch.trips.Load()
	b.RunParallel(func(pb *testing.PB) {
		key := make([]byte, 0, 32)
		for pb.Next() {
			key = strconv.AppendInt(append(key[:0], "user:"...), next.Add(1), 10)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if _, err := s.Take(ctx, sluice.Request{Key: string(key), Limit: lim, Cost: 1}); err != nil {
				b.Error(err)
			}
			cancel()
		}
	})
	b.ReportMetric(float64(s.batch.trips.Load()-trips0)/float64(b.N), "trips/op")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
