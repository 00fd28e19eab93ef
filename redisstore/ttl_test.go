package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestTTLCoversState tries to catch a key whose TTL runs out before its
// state is fresh again, now that a charge leaves the TTL alone while the
// expiry recorded in the hash (field e) still covers the state. For every
// scalar algorithm, one key is charged in bursts for about 1.5 s on the
// server's clock (the skip and the extension both happen), and after every
// decision the key's PTTL must cover the decision's ResetAfter plus the
// second of slack.
func TestTTLCoversState(t *testing.T) {
	ctx := context.Background()
	c := redistest.Standalone(t)
	s, err := New(c, Config{Prefix: redistest.Prefix(t), NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limits := []sluice.Limit{
		sluice.FixedWindow(1000, 300*time.Millisecond),
		sluice.SlidingWindow(1000, 300*time.Millisecond),
		sluice.TokenBucket(sluice.PerSecond(200), 50),
		sluice.GCRA(sluice.PerSecond(200), 50),
		sluice.LeakyBucket(sluice.PerSecond(200), 50),
		sluice.WarmUp(sluice.PerSecond(200), 200*time.Millisecond),
	}
	const slack = time.Second
	const tolerance = 250 * time.Millisecond // between the script and PTTL: a stall of a loaded machine, well under the slack
	check := func(l sluice.Limit, key string, d sluice.Decision) {
		t.Helper()
		state, _ := s.stateKeys(&sluice.Request{Key: key, Limit: l})
		ttl, err := c.PTTL(ctx, state).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed && ttl < d.ResetAfter+slack-tolerance {
			t.Fatalf("%s: key TTL %v does not cover the state: ResetAfter %v + %v slack", l, ttl, d.ResetAfter, slack)
		}
	}
	for _, l := range limits {
		key := "ttl"
		deadline := time.Now().Add(1500 * time.Millisecond)
		n := 0
		for time.Now().Before(deadline) {
			for range 3 {
				d, err := s.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				check(l, key, d)
				n++
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n < 30 {
			t.Fatalf("%s: only %d decisions", l, n)
		}
	}
}
