package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/failover"
)

// census counts the sluice instances sharing one Redis (and key prefix),
// so that each instance's fallback enforces 1/N of every limit while Redis
// is down (store.redis.fallback_scale unset). Every instance adds itself,
// each interval, to a sorted set scored by the time (its own clock: the
// instances' clocks must agree within the census's TTL), and counts the
// members seen within the TTL. While Redis does not answer, the last count
// stands.
type census struct {
	client   redis.UniversalClient
	key, id  string
	interval time.Duration
	ttl      time.Duration
	fs       *failover.Store
	log      *slog.Logger

	n    int // the last count
	stop chan struct{}
	wg   sync.WaitGroup
}

// censusInterval is how often an instance counts; one missing for five
// intervals is gone (a loaded machine delays the ticks, and a count that
// drops for a moment starts the fallback's counts afresh).
const censusInterval = time.Second

// startCensus starts counting, every interval, the instances under prefix
// and setting fs's fallback scale to 1/N; close stops it and removes this
// instance.
func startCensus(client redis.UniversalClient, prefix string, fs *failover.Store, logger *slog.Logger, interval time.Duration) *census {
	id := make([]byte, 8)
	rand.Read(id)
	c := &census{
		client: client, key: prefix + "instances", id: hex.EncodeToString(id),
		interval: interval, ttl: 5 * interval, fs: fs, log: logger, n: 1, stop: make(chan struct{}),
	}
	c.wg.Go(c.run)
	return c
}

func (c *census) run() {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.count(time.Now())
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// count adds this instance, counts the live ones and sets the scale.
func (c *census) count(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.interval)
	defer cancel()
	ms := now.UnixMilli()
	pipe := c.client.Pipeline()
	pipe.ZAdd(ctx, c.key, redis.Z{Score: float64(ms), Member: c.id})
	pipe.ZRemRangeByScore(ctx, c.key, "-inf", "("+strconv.FormatInt(ms-c.ttl.Milliseconds(), 10))
	card := pipe.ZCard(ctx, c.key)
	pipe.PExpire(ctx, c.key, 2*c.ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return // Redis is down or slow: the last count stands
	}
	n := max(1, int(card.Val()))
	if n == c.n {
		return
	}
	c.n = n
	c.fs.SetFallbackScale(1 / float64(n)) // in (0, 1]: valid
	c.log.Info("instances sharing the store counted: while it is down, each enforces its share of every limit",
		"instances", n, "fallback_scale", 1/float64(n))
}

// close stops the census and removes this instance from the count.
func (c *census) close() {
	close(c.stop)
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), c.interval)
	defer cancel()
	c.client.ZRem(ctx, c.key, c.id)
}
