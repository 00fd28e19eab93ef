package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var lim = sluice.FixedWindow(3, time.Hour)

// TestNearCacheBound: the cache never holds more than its size, and a set
// of keys that fits is held whole however the keys spread over shards.
func TestNearCacheBound(t *testing.T) {
	c := newNearCache(1000)
	now := time.Now()
	d := sluice.Decision{RetryAfter: time.Hour, ResetAfter: time.Hour}
	for i := range 950 {
		c.put("k"+strconv.Itoa(i), &lim, 1, 0, d, now)
	}
	for i := range 950 {
		if _, ok := c.get("k"+strconv.Itoa(i), &lim, 1, 0, now); !ok {
			t.Fatalf("key %d of 950 evicted from a cache of 1000", i)
		}
	}
	for i := range 100_000 {
		c.put("x"+strconv.Itoa(i), &lim, 1, 0, d, now)
		if n := c.n.Load(); n > 1000 {
			t.Fatalf("cache holds %d entries, bound 1000", n)
		}
	}
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].m)
	}
	if int64(total) != c.n.Load() {
		t.Fatalf("count %d, entries %d", c.n.Load(), total)
	}
	// A smaller cost than the refused one might fit: not answered.
	c.put("big", &lim, 5, 0, d, now)
	if _, ok := c.get("big", &lim, 4, 0, now); ok {
		t.Fatal("a cheaper request was answered by a refusal of a dearer one")
	}
	if got, ok := c.get("big", &lim, 5, 0, now.Add(time.Minute)); !ok || got.RetryAfter != 59*time.Minute {
		t.Fatalf("remembered refusal a minute later: %+v %v", got, ok)
	}
}

// TestNearCacheMaxDelay: a refusal of a request that would not wait long
// enough answers only requests that wait no longer.
func TestNearCacheMaxDelay(t *testing.T) {
	c := newNearCache(10)
	now := time.Now()
	c.put("k", &lim, 1, 100*time.Millisecond, sluice.Decision{RetryAfter: time.Second}, now)
	for _, tc := range []struct {
		maxDelay time.Duration
		answered bool
	}{{50 * time.Millisecond, true}, {100 * time.Millisecond, true}, {101 * time.Millisecond, false}, {0, false}} {
		if _, ok := c.get("k", &lim, 1, tc.maxDelay, now); ok != tc.answered {
			t.Errorf("max delay %s: answered %v, want %v", tc.maxDelay, ok, tc.answered)
		}
	}
	c.put("u", &lim, 1, 0, sluice.Decision{RetryAfter: time.Second}, now) // refused without a bound
	if _, ok := c.get("u", &lim, 1, time.Millisecond, now); !ok {
		t.Error("a refusal without a bound did not answer a bounded request")
	}
}

// TestNearCacheLimit: a refusal under one limit does not answer a request
// under another (a raised limit), although both keep one state key.
func TestNearCacheLimit(t *testing.T) {
	c := newNearCache(10)
	now := time.Now()
	c.put("k", &lim, 1, 0, sluice.Decision{RetryAfter: time.Hour}, now)
	raised := sluice.FixedWindow(4, time.Hour)
	if _, ok := c.get("k", &raised, 1, 0, now); ok {
		t.Error("a refusal under 3/h answered a request under 4/h")
	}
	if _, ok := c.get("k", &lim, 1, 0, now); !ok {
		t.Error("a refusal under 3/h did not answer a request under 3/h")
	}
}
