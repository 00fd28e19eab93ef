//go:build redisbench

package bench_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestRedisOneKeyTurns times serial decisions on one key of sluice and the
// peers of BenchmarkRedisOneKey in turns: one call of each library per
// turn, the order rotating, each call timed alone, and reports each one's
// median and sluice's decisions per second over the fastest peer's (the
// ratio of the medians). BenchmarkRedisOneKey's serial cases run one after
// another, seconds apart, and on a shared machine the round trip moves
// more than the difference between the libraries in that time; calls in
// turns see the same machine. REDISBENCH_TURNS sets the turns (default
// 20,000).
func TestRedisOneKeyTurns(t *testing.T) {
	turns := 20_000
	if v := os.Getenv("REDISBENCH_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("REDISBENCH_TURNS=%q: want a count of at least 100", v)
		}
		turns = n
	}
	ctx := context.Background()
	admin := newClient()
	defer admin.Close()
	flush(t, admin)
	var names []string
	var allows []allowFunc
	for _, lib := range redisLibs {
		if !oneOf(lib.name, oneKeyLibs) {
			continue
		}
		rdb := newClient()
		defer rdb.Close()
		allow, closer, err := lib.new(rdb)
		if err != nil {
			t.Fatal(err)
		}
		defer closer()
		for range 1000 { // scripts loaded, the key in use
			if _, err := allow(ctx, "one"); err != nil {
				t.Fatal(err)
			}
		}
		names, allows = append(names, lib.name), append(allows, allow)
	}
	took := make([][]time.Duration, len(allows))
	for i := range turns {
		for j := range allows {
			k := (i + j) % len(allows)
			start := time.Now()
			ok, err := allows[k](ctx, "one")
			took[k] = append(took[k], time.Since(start))
			if err != nil || !ok {
				t.Fatalf("%s: %v %v", names[k], ok, err)
			}
		}
	}
	medians := make([]time.Duration, len(took))
	fastestPeer := time.Duration(0)
	for k, ds := range took {
		slices.Sort(ds)
		medians[k] = ds[len(ds)/2]
		t.Logf("%-16s median %v, p90 %v", names[k], medians[k], ds[len(ds)*9/10])
		if k > 0 && (fastestPeer == 0 || medians[k] < fastestPeer) {
			fastestPeer = medians[k]
		}
	}
	t.Logf("sluice's decisions/s over the fastest peer's (medians, %d turns): %.2fx", turns, float64(fastestPeer)/float64(medians[0]))
}
