package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestNearCacheBound: the cache never holds more than its size, and a set
// of keys that fits is held whole however the keys spread over shards.
func TestNearCacheBound(t *testing.T) {
	c := newNearCache(1000)
	now := time.Now()
	d := sluice.Decision{RetryAfter: time.Hour, ResetAfter: time.Hour}
	for i := range 950 {
		c.put("k"+strconv.Itoa(i), 1, d, now)
	}
	for i := range 950 {
		if _, ok := c.get("k"+strconv.Itoa(i), 1, now); !ok {
			t.Fatalf("key %d of 950 evicted from a cache of 1000", i)
		}
	}
	for i := range 100_000 {
		c.put("x"+strconv.Itoa(i), 1, d, now)
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
	c.put("big", 5, d, now)
	if _, ok := c.get("big", 4, now); ok {
		t.Fatal("a cheaper request was answered by a refusal of a dearer one")
	}
	if got, ok := c.get("big", 5, now.Add(time.Minute)); !ok || got.RetryAfter != 59*time.Minute {
		t.Fatalf("remembered refusal a minute later: %+v %v", got, ok)
	}
}
