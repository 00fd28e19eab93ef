package redisstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// nearCache remembers keys Redis refused, until the time it said they may
// retry, so that retries before then are answered without a round trip. A
// remembered refusal answers only requests of at least the refused cost and
// with at most its MaxDelay: a smaller one, or one that waits longer, might
// fit. It holds at most max entries in all (give or take
// one per concurrent writer); when it is full, entries of the shard being
// written that have expired go first, then arbitrary ones of that shard, and
// if that shard has none the refusal is not remembered. Shards may hold twice
// their even share, so an uneven spread of keys does not evict while the
// cache has room.
type nearCache struct {
	seed   maphash.Seed
	shards [16]nearShard
	max    int          // in all
	perMax int          // per shard
	n      atomic.Int64 // entries in all
}

type nearShard struct {
	mu sync.Mutex
	m  map[string]nearEntry
}

type nearEntry struct {
	at       time.Time // when Redis refused
	cost     int64
	maxDelay time.Duration // 0: no bound
	d        sluice.Decision
}

func newNearCache(size int) *nearCache {
	c := &nearCache{seed: maphash.MakeSeed(), max: size, perMax: max(1, 2*size/16)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]nearEntry)
	}
	return c
}

func (c *nearCache) shard(key string) *nearShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns the refusal for key at now, its times shortened by the time
// since Redis gave it, if one is remembered and still holds for cost and
// maxDelay.
func (c *nearCache) get(key string, cost int64, maxDelay time.Duration, now time.Time) (sluice.Decision, bool) {
	if c == nil || cost == 0 {
		return sluice.Decision{}, false
	}
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok || cost < e.cost || waitsLonger(maxDelay, e.maxDelay) {
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

// waitsLonger reports whether a request bounded by maxDelay may wait longer
// than one bounded by than (0 is no bound).
func waitsLonger(maxDelay, than time.Duration) bool {
	return than != 0 && (maxDelay == 0 || maxDelay > than)
}

func (c *nearCache) put(key string, cost int64, maxDelay time.Duration, d sluice.Decision, now time.Time) {
	if c == nil {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok {
		if len(sh.m) >= c.perMax || c.n.Load() >= int64(c.max) {
			for k, e := range sh.m {
				if now.Sub(e.at) >= e.d.RetryAfter {
					delete(sh.m, k)
					c.n.Add(-1)
				}
			}
			for k := range sh.m {
				if len(sh.m) < c.perMax && c.n.Load() < int64(c.max) {
					break
				}
				delete(sh.m, k)
				c.n.Add(-1)
			}
			if len(sh.m) >= c.perMax || c.n.Load() >= int64(c.max) {
				return // full elsewhere: the refusal is simply not remembered
			}
		}
		c.n.Add(1)
	}
	sh.m[key] = nearEntry{at: now, cost: cost, maxDelay: maxDelay, d: d}
}

// forget drops what is remembered for key: a refund may have made room.
func (c *nearCache) forget(key string) {
	if c == nil {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		c.n.Add(-1)
	}
	sh.mu.Unlock()
}
