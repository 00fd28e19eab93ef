//go:build redisbench

package bench_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// TestRedisCheckRatio measures what a composite check costs next to a
// single decision: one Limiter.Allow (checkGCRA's first limit) and one
// Limiter.Check of three limits (checkGCRA, then checkMixed) on the same
// key index, taken in turns from one goroutine, each call timed alone, the
// order of the three changed at every turn. On this shared machine a
// serial round trip can double within a minute; BenchmarkRedisCheck runs
// its cases one after another, so such a drift lands on one case and its
// ratio moves with it (0.96x to 1.63x in six rounds). Calls taken in turns
// see the same machine, so the ratio of their medians holds still.
// REDISRATIO_TURNS sets the number of turns (default 20,000).
func TestRedisCheckRatio(t *testing.T) {
	turns := 20_000
	if v := os.Getenv("REDISRATIO_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("REDISRATIO_TURNS=%q: want a count of at least 100", v)
		}
		turns = n
	}
	ctx := context.Background()
	lim := freshLimiter(t, redisstore.Config{Prefix: redisPrefix + ":ratio:"})

	kinds := []struct {
		name string
		call func(i int) (sluice.Decision, error)
	}{
		{"allow-1", func(i int) (sluice.Decision, error) { return lim.Allow(ctx, checkKeys[0][i], checkGCRA[0]) }},
		{"check-3-gcra", func(i int) (sluice.Decision, error) { return check3(ctx, lim, &checkGCRA, i) }},
		{"check-3-mixed", func(i int) (sluice.Decision, error) { return check3(ctx, lim, &checkMixed, i) }},
	}
	// Every key of every kind used once first, so that the timed calls find
	// keys in use, as BenchmarkRedisCheck's do after its warm-up.
	for i := range numKeys {
		for _, k := range kinds {
			if d, err := k.call(i); err != nil || !d.Allowed {
				t.Fatalf("%s, key %d, warm-up: %+v %v", k.name, i, d, err)
			}
		}
	}
	took := make([][]time.Duration, len(kinds))
	for j := range took {
		took[j] = make([]time.Duration, 0, turns)
	}
	p := newKeyPicker(numKeys, 7)
	for n := range turns {
		i := p.next()
		for o := range kinds {
			j := (n + o) % len(kinds)
			start := time.Now()
			d, err := kinds[j].call(i)
			took[j] = append(took[j], time.Since(start))
			if err != nil || !d.Allowed {
				t.Fatalf("%s, key %d: %+v %v", kinds[j].name, i, d, err)
			}
		}
	}
	q := func(ds []time.Duration, f float64) time.Duration { return ds[int(f*float64(len(ds)-1))] }
	for j := range took {
		slices.Sort(took[j])
	}
	base := q(took[0], 0.5)
	for j, k := range kinds {
		ds := took[j]
		t.Logf("%-14s p25 %6.1f µs  median %6.1f µs  p75 %6.1f µs  median / allow-1 %.2fx", k.name,
			us(q(ds, 0.25)), us(q(ds, 0.5)), us(q(ds, 0.75)), float64(q(ds, 0.5))/float64(base))
	}
	fmt.Fprintf(os.Stderr, "ratio of medians to allow-1 over %d turns: check-3-gcra %.2fx, check-3-mixed %.2fx\n", turns,
		float64(q(took[1], 0.5))/float64(base), float64(q(took[2], 0.5))/float64(base))
}

// freshLimiter returns a Limiter on a redisstore configured by cfg, on the
// benchmark server, flushed first; its client and store close when the test
// ends.
func freshLimiter(t *testing.T, cfg redisstore.Config) *sluice.Limiter {
	t.Helper()
	admin := newClient()
	defer admin.Close()
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("no Redis at %s (start one, or set REDISBENCH_ADDR): %v", redisAddr(), err)
	}
	flush(t, admin)
	rdb := newClient()
	t.Cleanup(func() { rdb.Close() })
	store, err := redisstore.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return sluice.New(store)
}

func check3(ctx context.Context, lim *sluice.Limiter, limits *[3]sluice.Limit, i int) (sluice.Decision, error) {
	var reqs [3]sluice.Request
	for d := range reqs {
		reqs[d] = sluice.Request{Key: checkKeys[d][i], Limit: limits[d], Cost: 1}
	}
	return lim.Check(ctx, reqs[:]...)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
