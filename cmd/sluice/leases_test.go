package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeLeases: three sluice serve processes with quota leases on one
// Redis (and on a Cluster, where the rule's one_slot keeps its global and
// per-user keys on one slot, so its checks can lease) admit no more than
// the rule's global limit, all of it but what the three may still hold,
// at a fraction of a script call per request. Without one_slot, on a
// Cluster, the check spans slots and every request is a call (at least).
func TestServeLeases(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		oneSlot bool
	}{{"standalone", true}, {"cluster", true}, {"cluster", false}} {
		mode := tc.mode
		t.Run(mode+"/one_slot="+strconv.FormatBool(tc.oneSlot), func(t *testing.T) {
			var addrs string
			var rdb redis.UniversalClient
			if mode == "standalone" {
				c := redistest.Standalone(t)
				addrs, rdb = c.Options().Addr, c
			} else {
				c := redistest.Cluster(t)
				addrs, rdb = joinComma(c.Options().Addrs), c
			}
			dir := t.TempDir()
			policy, config := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "config.yaml")
			// Buckets that refill one unit an hour: over the test their
			// bound is their burst, and the global one (600) binds first.
			writeFile(t, policy, `
rules:
  - name: api
    one_slot: `+strconv.FormatBool(tc.oneSlot)+`
    limits:
      - {name: everyone, key: global, algorithm: token_bucket, rate: 1/h, burst: 600}
      - {name: per-user, key: header:X-User, algorithm: gcra, rate: 1/h, burst: 250}
`)
			writeFile(t, config, "store:\n  redis:\n    leases: {enabled: true}\n")
			prefix := redistest.Prefix(t)
			var ps []*proc
			for range 3 {
				ps = append(ps, start(t, nil, "--config", config, "--store", "redis", "--redis-addrs", addrs, "--redis-mode", mode,
					"--redis-prefix", prefix, "--policy", policy, "--redis-timeout", "5s"))
			}
			before := scriptCalls(t, rdb)
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					p := ps[g%3]
					for k := range 100 {
						switch get(t, p.url("gateway", "/"), "X-User", "u"+strconv.Itoa((g+k)%3)).status {
						case 200:
							admitted.Add(1)
						case 429:
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			calls := scriptCalls(t, rdb) - before
			perRequest := float64(calls) / float64(admitted.Load())
			t.Logf("%d admitted, %d refused of 1200; %d script calls (%.3f per admitted request)", admitted.Load(), refused.Load(), calls, perRequest)
			// at most 600; at least 600 less what three instances may
			// hold (600/16 each)
			if n := admitted.Load(); n > 600 || n < 600-3*37 || admitted.Load()+refused.Load() != 1200 {
				t.Errorf("%d admitted, %d refused of 1200: want at most 600 admitted, at least %d", n, refused.Load(), 600-3*37)
			}
			switch {
			case tc.oneSlot && perRequest > 0.8: // 0.30-0.51 measured; without leases 1.9
				t.Errorf("%.3f script calls per admitted request, want a fraction (leases)", perRequest)
			case !tc.oneSlot && perRequest < 1:
				t.Errorf("%.3f script calls per admitted request across slots, want at least one (no leases)", perRequest)
			}
		})
	}
}

// scriptCalls is how many script and function calls Redis has run, over
// every master of a Cluster.
func scriptCalls(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var n int64
	count := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
					v, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
					mu.Lock()
					n += v
					mu.Unlock()
				}
			}
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(context.Background(), count)
	case *redis.Client:
		err = count(context.Background(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
