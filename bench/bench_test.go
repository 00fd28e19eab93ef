package bench

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// manyKeys is the number of distinct keys of the many-key cases.
const manyKeys = 100_000

// maxKeys is the key capacity given to libraries that bound it (sluice's
// memstore, throttled's LRU): well above manyKeys, so nothing is evicted.
const maxKeys = 1 << 18

// Key sets, generated once: "user:100000", "user:100001", ...
var (
	oneKey   = makeKeys(1)
	keys100k = makeKeys(manyKeys)
)

// makeKeys returns n distinct keys of the same length, like "user:123456".
func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(100_000+i)
	}
	return keys
}

// picker draws key indexes in [0, n) from a xorshift64 sequence: cheap,
// spread over the whole key set, and different for each seed, so parallel
// goroutines do not walk the keys in step.
type picker struct {
	x uint64
	n uint64
}

func newPicker(n int, seed uint64) *picker {
	// splitmix64 of the seed, so that consecutive seeds start far apart;
	// xorshift needs a non-zero state.
	z := seed + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return &picker{x: z, n: uint64(n)}
}

// next returns the next index, using the high 32 bits of the state scaled
// to n (a multiply and a shift, not a division).
func (p *picker) next() int {
	p.x ^= p.x << 13
	p.x ^= p.x >> 7
	p.x ^= p.x << 17
	return int((p.x >> 32) * p.n >> 32)
}

// BenchmarkAllow measures one decision per call for every library, named
// keys=K/path=P/mode=M/lib=L:
//
//   - keys: 1 key, or 100,000 distinct keys picked at random;
//   - path: allowed (a generous limit, every call admitted) or refused
//     (1 per hour, every key used once before timing, so every timed call
//     is refused);
//   - mode: serial (one goroutine) or parallel (b.RunParallel, GOMAXPROCS
//     goroutines).
//
// Every key has been used once, with a copy of its string, before the timer
// starts, so the store holds all of them and the loop measures the steady
// state. denied/op and
// errors/op report which path was measured; an error is not a decision.
func BenchmarkAllow(b *testing.B) {
	keySets := [][]string{oneKey, keys100k}
	paths := []struct {
		name   string
		policy policy
	}{{"allowed", generous}, {"refused", strict}}
	for _, keys := range keySets {
		b.Run("keys="+strconv.Itoa(len(keys)), func(b *testing.B) {
			for _, path := range paths {
				b.Run("path="+path.name, func(b *testing.B) {
					for _, parallel := range []bool{false, true} {
						mode := "serial"
						if parallel {
							mode = "parallel"
						}
						b.Run("mode="+mode, func(b *testing.B) {
							for _, lib := range libraries {
								b.Run("lib="+lib.name, func(b *testing.B) {
									benchAllow(b, lib, path.policy, keys, parallel)
								})
							}
						})
					}
				})
			}
		})
	}
}

// benchAllow times lib's decisions under p on keys, serially or from
// b.RunParallel, on a limiter built and warmed up outside the timed loop.
func benchAllow(b *testing.B, lib library, p policy, keys []string, parallel bool) {
	ctx := context.Background()
	lim, err := lib.new(p, maxKeys)
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	// Warm up: every key is seen once, which also exhausts the keys of the
	// strict policy. Each library gets its own copy of the key, as it would
	// from a request: one that keeps the caller's string must not find,
	// when it compares keys in the loop, the very bytes it has just hashed.
	for _, key := range keys {
		if _, err := lim.Allow(ctx, strings.Clone(key)); err != nil {
			b.Fatalf("warm-up of %s: %v", key, err)
		}
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()

	var denied, errs int64
	if parallel {
		var seed, deniedAll, errsAll atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			pick := newPicker(len(keys), uint64(seed.Add(1)))
			var denied, errs int64
			for pb.Next() {
				ok, err := lim.Allow(ctx, keys[pick.next()])
				switch {
				case err != nil:
					errs++
				case !ok:
					denied++
				}
			}
			deniedAll.Add(denied)
			errsAll.Add(errs)
		})
		denied, errs = deniedAll.Load(), errsAll.Load()
	} else {
		pick := newPicker(len(keys), 0)
		for range b.N {
			ok, err := lim.Allow(ctx, keys[pick.next()])
			switch {
			case err != nil:
				errs++
			case !ok:
				denied++
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
	b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
}
