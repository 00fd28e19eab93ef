package memstore

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestKeysAndLimitsKeepApart: every (key, limit) has its own state, for
// keys around the inline bound that share prefixes or differ only at the
// end, and for more limits than a shard shares: each admits exactly its
// own count, however many others are in use beside it.
func TestKeysAndLimitsKeepApart(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{Now: clk.now, Shards: 1, SweepInterval: -1})
	var keys []string
	for _, n := range []int{0, 1, inlineKey - 1, inlineKey, inlineKey + 1, 2 * inlineKey, 1000} {
		a := strings.Repeat("k", n)
		keys = append(keys, a)
		if n > 0 {
			keys = append(keys, a[:n-1]+"x") // differs in its last byte
		}
	}
	var limits []sluice.Limit
	for n := int64(1); n <= maxShared+20; n++ {
		limits = append(limits, sluice.FixedWindow(n, time.Minute))
	}
	for round := 0; round < 2; round++ { // the second finds every state in place
		for _, key := range keys {
			for _, lim := range limits {
				r := sluice.Request{Key: key, Limit: lim, Cost: 1}
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				// Round 0 takes 1 of each; round 1 takes the rest.
				want := round == 0 || lim.Count >= 2
				if d.Allowed != want {
					t.Fatalf("round %d, key of %d bytes %.8q…, %s: allowed %v, want %v", round, len(key), key, lim, d.Allowed, want)
				}
				if round == 1 {
					for range lim.Count - 2 {
						if d, _ := s.Take(ctx, r); !d.Allowed {
							t.Fatalf("key of %d bytes, %s: refused before its count", len(key), lim)
						}
					}
					if d, _ := s.Take(ctx, r); d.Allowed {
						t.Fatalf("key of %d bytes, %s: admitted past its count", len(key), lim)
					}
				}
			}
		}
	}
	if got, want := s.Len(), len(keys)*len(limits); got != want {
		t.Errorf("Len() = %d, want %d (one state per key and limit)", got, want)
	}
}

// TestLookupUnderOneHash: entries whose hashes collide share a chain, and
// lookup tells them apart by key and limit alone. Every (key, limit) of
// TestKeysAndLimitsKeepApart's kind is put under one hash, as if the hash
// collided for all of them.
func TestLookupUnderOneHash(t *testing.T) {
	s := newStore(t, Config{Shards: 1, SweepInterval: -1})
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	const h = 42
	var keys []string
	for _, n := range []int{0, 1, inlineKey - 1, inlineKey, inlineKey + 1, 1000} {
		a := strings.Repeat("k", n)
		keys = append(keys, a)
		if n > 0 {
			keys = append(keys, a[:n-1]+"x")
		}
	}
	limits := []sluice.Limit{sluice.FixedWindow(1, time.Minute), sluice.FixedWindow(2, time.Minute), sluice.GCRA(sluice.PerSecond(1), 1)}
	made := map[*entry][2]int{}
	for i, key := range keys {
		for j, lim := range limits {
			if sh.lookup(h, key, lim) != nil {
				t.Fatalf("key of %d bytes under %s found before it was inserted", len(key), lim)
			}
			c, err := sh.compile(lim)
			if err != nil {
				t.Fatal(err)
			}
			made[sh.insert(h, key, c, 1<<20)] = [2]int{i, j}
		}
	}
	for e, ij := range made {
		key, lim := keys[ij[0]], limits[ij[1]]
		if got := sh.lookup(h, key, lim); got != e {
			t.Errorf("key of %d bytes %.8q…, %s: lookup found another entry", len(key), key, lim)
		}
	}
	if len(sh.limits) != len(limits) {
		t.Errorf("shard shares %d compiled limits, want %d", len(sh.limits), len(limits))
	}
}

// TestSharedLimitsBounded: a shard shares at most maxShared compiled
// limits however many distinct limits it sees (one computed from client
// input could take any value).
func TestSharedLimitsBounded(t *testing.T) {
	s := newStore(t, Config{Shards: 1, SweepInterval: -1})
	for n := int64(1); n <= 3*maxShared; n++ {
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(n, time.Minute), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.shards[0].limits); got != maxShared {
		t.Errorf("shard shares %d compiled limits, want %d", got, maxShared)
	}
}
