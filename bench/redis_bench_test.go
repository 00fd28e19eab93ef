//go:build redisbench

package bench_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// benchEnv is one benchmark run of one library: a fresh client and
// limiter on a flushed server.
type benchEnv struct {
	allow  allowFunc
	closer func()
	rdb    *redis.Client // the library's client
	admin  *redis.Client // FLUSHALL and INFO, off the library's pool
	before map[string]cmdStat
}

func startEnv(b *testing.B, build func(*redis.Client) (allowFunc, func(), error)) *benchEnv {
	b.Helper()
	b.StopTimer()
	e := &benchEnv{rdb: newClient(), admin: newClient()}
	if err := e.admin.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("no Redis at %s (start one, or set REDISBENCH_ADDR): %v", redisAddr(), err)
	}
	flush(b, e.admin)
	allow, closer, err := build(e.rdb)
	if err != nil {
		b.Fatal(err)
	}
	e.allow, e.closer = allow, closer
	if b.N > 1 { // the b.N = 1 probe only sizes the next run
		warm(b, allow)
	}
	if e.before, err = commandStats(context.Background(), e.admin); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.StartTimer()
	return e
}

// finish reports the metrics: refusals and errors per decision (both must
// be 0), decisions per second, and the server's time per decision.
func (e *benchEnv) finish(b *testing.B, denied, errs int64, firstErr error) {
	b.Helper()
	b.StopTimer()
	after, err := commandStats(context.Background(), e.admin)
	if err != nil {
		b.Fatal(err)
	}
	usec, _, detail := serverTime(e.before, after)
	b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
	b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(usec)/float64(b.N), "srv-µs/op")
	if b.N > 1000 && testing.Verbose() {
		b.Logf("N=%d commandstats (calls/usec per call): %s", b.N, detail)
	}
	if firstErr != nil {
		b.Logf("%d errors, first: %v", errs, firstErr)
	}
	e.closer()
	e.rdb.Close()
	e.admin.Close()
}

// errOnce keeps the first error of a run.
type errOnce struct {
	once sync.Once
	err  error
}

func (o *errOnce) set(err error) { o.once.Do(func() { o.err = err }) }

// serialLoop times b.N decisions from one goroutine on a fresh environment
// built by build, counting refusals and errors apart.
func serialLoop(b *testing.B, build func(*redis.Client) (allowFunc, func(), error)) {
	e := startEnv(b, build)
	ctx := context.Background()
	p := newKeyPicker(numKeys, 1)
	var denied, errs int64
	var first errOnce
	for range b.N {
		ok, err := e.allow(ctx, redisKeys[p.next()])
		switch {
		case err != nil:
			errs++
			first.set(err)
		case !ok:
			denied++
		}
	}
	e.finish(b, denied, errs, first.err)
}

// BenchmarkRedisSerial: one goroutine, a plain loop; ns/op is the latency
// of one decision.
func BenchmarkRedisSerial(b *testing.B) {
	for _, lib := range redisLibs {
		b.Run(lib.name, func(b *testing.B) {
			serialLoop(b, lib.new)
		})
	}
}

// BenchmarkRedisParallel32 and BenchmarkRedisParallel128: 32 and 128
// goroutines (SetParallelism(n / GOMAXPROCS)) deciding as fast as they can;
// ns/op is the inverse of throughput.
func BenchmarkRedisParallel32(b *testing.B)  { benchParallel(b, 32) }
func BenchmarkRedisParallel128(b *testing.B) { benchParallel(b, 128) }

func benchParallel(b *testing.B, goroutines int) {
	procs := runtime.GOMAXPROCS(0)
	if goroutines%procs != 0 {
		b.Fatalf("GOMAXPROCS %d does not divide %d goroutines", procs, goroutines)
	}
	for _, lib := range redisLibs {
		b.Run(lib.name, func(b *testing.B) {
			e := startEnv(b, lib.new)
			denied, errs, first := runParallel(b, goroutines, e.allow)
			e.finish(b, denied, errs, first)
		})
	}
}

// runParallel calls allow b.N times from goroutines goroutines
// (SetParallelism(goroutines / GOMAXPROCS)), each on keys of its own
// picker, and counts refusals and errors apart.
func runParallel(b *testing.B, goroutines int, allow allowFunc) (denied, errs int64, first error) {
	ctx := context.Background()
	var d, n atomic.Int64
	var once errOnce
	b.SetParallelism(goroutines / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		p := nextPicker(numKeys)
		var dd, nn int64
		for pb.Next() {
			ok, err := allow(ctx, redisKeys[p.next()])
			switch {
			case err != nil:
				nn++
				once.set(err)
			case !ok:
				dd++
			}
		}
		d.Add(dd)
		n.Add(nn)
	})
	return d.Load(), n.Load(), once.err
}

// The composite check: three limits on three keys of one user, decided
// all-or-nothing by Limiter.Check. On a standalone server they are one
// EVALSHA of one script.
var (
	checkKeys = func() [3][]string {
		var ks [3][]string
		for d, prefix := range []string{"route:", "user:", "tenant:"} {
			ks[d] = make([]string, numKeys)
			for i := range numKeys {
				ks[d][i] = prefix + redisKeys[i]
			}
		}
		return ks
	}()
	// checkGCRA: three GCRA limits (the script holding only GCRA).
	checkGCRA = [3]sluice.Limit{
		sluice.GCRA(sluice.PerSecond(gcraRate), gcraRate),
		sluice.GCRA(sluice.PerSecond(2*gcraRate), 2*gcraRate),
		sluice.GCRA(sluice.PerSecond(gcraRate/2), gcraRate/2),
	}
	// checkMixed: GCRA, fixed window and sliding window (the script holding
	// every algorithm).
	checkMixed = [3]sluice.Limit{sluiceGCRA, sluiceFixed, sluiceSliding}
)

func newSluiceCheck(limits *[3]sluice.Limit, n int) func(*redis.Client) (allowFunc, func(), error) {
	return func(rdb *redis.Client) (allowFunc, func(), error) {
		store, err := redisstore.New(rdb, redisstore.Config{Prefix: redisPrefix + ":sluice:"})
		if err != nil {
			return nil, nil, err
		}
		lim := sluice.New(store)
		index := make(map[string]int, numKeys)
		for i, k := range redisKeys {
			index[k] = i
		}
		allow := func(ctx context.Context, key string) (bool, error) {
			i := index[key]
			if n == 1 {
				d, err := lim.Allow(ctx, checkKeys[0][i], limits[0])
				return d.Allowed, err
			}
			var reqs [3]sluice.Request
			for d := range n {
				reqs[d] = sluice.Request{Key: checkKeys[d][i], Limit: limits[d], Cost: 1}
			}
			d, err := lim.Check(ctx, reqs[:n]...)
			return d.Allowed, err
		}
		return allow, func() { store.Close() }, nil
	}
}

// BenchmarkRedisCheck: serial latency of one Allow against one Check of
// three limits (the same map lookup of the key index in both).
func BenchmarkRedisCheck(b *testing.B) {
	cases := []struct {
		name  string
		build func(*redis.Client) (allowFunc, func(), error)
	}{
		{"allow-1", newSluiceCheck(&checkGCRA, 1)},
		{"check-3-gcra", newSluiceCheck(&checkGCRA, 3)},
		{"check-3-mixed", newSluiceCheck(&checkMixed, 3)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			serialLoop(b, c.build)
		})
	}
}
