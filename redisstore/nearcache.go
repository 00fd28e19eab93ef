package redisstore

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// nearCache remembers keys Redis refused, until the time it said they may
// retry, so that retries before then are answered without a round trip. A
// remembered refusal answers only requests of at least the refused cost: a
// smaller one might fit. It is bounded: when a shard is full, entries that
// have expired go first, then arbitrary ones.
type nearCache struct {
	seed   maphash.Seed
	shards [16]nearShard
	max    int // per shard
}

type nearShard struct {
	mu sync.Mutex
	m  map[string]nearEntry
}

type nearEntry struct {
	at   time.Time // when Redis refused
	cost int64
	d    sluice.Decision
}

func newNearCache(size int) *nearCache {
	c := &nearCache{seed: maphash.MakeSeed(), max: max(1, size/16)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]nearEntry)
	}
	return c
}

func (c *nearCache) shard(key string) *nearShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns the refusal for key at now, its times shortened by the time
// since Redis gave it, if one is remembered and still holds for cost.
func (c *nearCache) get(key string, cost int64, now time.Time) (sluice.Decision, bool) {
	if c == nil || cost == 0 {
		return sluice.Decision{}, false
	}
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok || cost < e.cost {
		return sluice.Decision{}, false
	}
	elapsed := now.Sub(e.at)
	if elapsed >= e.d.RetryAfter || elapsed < 0 {
		return sluice.Decision{}, false
	}
	d := e.d
	d.RetryAfter -= elapsed
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	return d, true
}

func (c *nearCache) put(key string, cost int64, d sluice.Decision, now time.Time) {
	if c == nil {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.max {
		for k, e := range sh.m {
			if now.Sub(e.at) >= e.d.RetryAfter {
				delete(sh.m, k)
			}
		}
		for k := range sh.m {
			if len(sh.m) < c.max {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[key] = nearEntry{at: now, cost: cost, d: d}
}
