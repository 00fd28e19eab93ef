//go:build redisbench

package bench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// The retry storm: of numKeys keys, stormExhausted have used their whole
// burst under a limit that refills one unit per hour; 95% of the requests
// go to those keys, 5% to the others, which admit them.
const (
	stormRequests   = 100_000
	stormExhausted  = 9_500
	stormGoroutines = 32
	stormBurst      = 100
)

var stormLimit = sluice.GCRA(sluice.Per(stormBurst, stormBurst*time.Hour), stormBurst)

type stormResult struct {
	evalsha, allowed, denied, errs int64
	wantAllowed, wantDenied        int64
	primeEvalsha                   int64
	elapsed                        time.Duration
}

// runStorm exhausts the keys through a store with the given NearCache
// setting, then, if primed, asks once for every exhausted key (each is
// refused: "keys already refused"), then sends the storm and counts the
// EVALSHA commands the server ran during it.
func runStorm(t *testing.T, nearCache int, primed bool) stormResult {
	ctx := context.Background()
	admin := newClient()
	defer admin.Close()
	lim := freshLimiter(t, redisstore.Config{Prefix: redisPrefix + ":storm:", NearCache: nearCache})

	parallel := func(n int, f func(i int) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		var first errOnce
		for range stormGoroutines {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					if err := f(i); err != nil {
						first.set(err)
					}
				}
			})
		}
		wg.Wait()
		if first.err != nil {
			t.Fatal(first.err)
		}
	}
	parallel(stormExhausted, func(i int) error {
		d, err := lim.AllowN(ctx, redisKeys[i], stormLimit, stormBurst)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("exhausting %s: refused", redisKeys[i])
		}
		return err
	})
	var res stormResult
	stats := func() int64 {
		s, err := commandStats(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		return scriptCalls(s)
	}
	if primed {
		before := stats()
		parallel(stormExhausted, func(i int) error {
			d, err := lim.Allow(ctx, redisKeys[i], stormLimit)
			if err == nil && d.Allowed {
				err = fmt.Errorf("priming %s: admitted", redisKeys[i])
			}
			return err
		})
		res.primeEvalsha = stats() - before
	}

	before := stats()
	start := time.Now()
	var wg sync.WaitGroup
	var allowed, denied, errs, wantAllowed atomic.Int64
	for g := range stormGoroutines {
		wg.Go(func() {
			// The same seeds in every configuration: the same requests.
			p := newKeyPicker(100, uint64(1000+g))
			var a, d, e, wa int64
			for range stormRequests / stormGoroutines {
				var key string
				if p.next() < 95 {
					key = redisKeys[p.r.IntN(stormExhausted)]
				} else {
					key = redisKeys[stormExhausted+p.r.IntN(numKeys-stormExhausted)]
					wa++
				}
				dec, err := lim.Allow(ctx, key, stormLimit)
				switch {
				case err != nil:
					e++
				case dec.Allowed:
					a++
				default:
					d++
				}
			}
			allowed.Add(a)
			denied.Add(d)
			errs.Add(e)
			wantAllowed.Add(wa)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.evalsha = stats() - before
	res.allowed, res.denied, res.errs = allowed.Load(), denied.Load(), errs.Load()
	res.wantAllowed = wantAllowed.Load()
	res.wantDenied = stormRequests - res.wantAllowed
	return res
}

// TestRedisNearCacheStorm prints the EVALSHA commands per 100,000 storm
// requests with the near cache at its default size (10,000 entries), disabled,
// and at 20,000 entries (room for all 9,500 refused keys in every shard), with
// the refused keys already refused once before the storm (primed) and not.
func TestRedisNearCacheStorm(t *testing.T) {
	results := map[string]stormResult{}
	for _, primed := range []bool{true, false} {
		for _, nc := range []struct {
			name string
			size int
		}{{"default", 0}, {"disabled", -1}, {"20000", 20_000}} {
			r := runStorm(t, nc.size, primed)
			name := fmt.Sprintf("nearcache=%s primed=%t", nc.name, primed)
			results[name] = r
			fmt.Printf("storm: %-36s requests=%d evalsha=%d evalsha/op=%.4f allowed=%d (want %d) denied=%d (want %d) errors=%d elapsed=%v prime-evalsha=%d\n",
				name, stormRequests, r.evalsha, float64(r.evalsha)/stormRequests, r.allowed, r.wantAllowed, r.denied, r.wantDenied, r.errs, r.elapsed.Round(time.Millisecond), r.primeEvalsha)
			if r.errs != 0 || r.allowed != r.wantAllowed || r.denied != r.wantDenied {
				t.Errorf("%s: allowed %d denied %d errors %d; want %d, %d, 0", name, r.allowed, r.denied, r.errs, r.wantAllowed, r.wantDenied)
			}
		}
		on := results[fmt.Sprintf("nearcache=default primed=%t", primed)]
		off := results[fmt.Sprintf("nearcache=disabled primed=%t", primed)]
		fmt.Printf("storm: primed=%t: %.1fx fewer script calls (EVALSHA, FCALL) with the near cache (%d vs %d)\n",
			primed, float64(off.evalsha)/float64(max(on.evalsha, 1)), on.evalsha, off.evalsha)
		if off.evalsha == 0 {
			t.Errorf("primed=%t: no script call counted without the near cache: the count misses sluice's commands", primed)
		} else if primed && off.evalsha < 10*on.evalsha {
			t.Errorf("primed: %d script calls with the near cache, %d without: fewer than 10x", on.evalsha, off.evalsha)
		}
	}
}

// The exact EVALSHA of each of sluice's take scripts (for redis-benchmark)
// is written, and checked against a server, by redisstore's
// TestScriptCostCommands: see REDIS.md.
