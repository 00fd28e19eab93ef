package metrics

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storeOps are the values of sluice_store_duration_seconds's op label.
var storeOps = [...]string{"take", "take_all", "release", "adjust"}

// storeBuckets are the upper bounds of sluice_store_duration_seconds.
var storeBuckets = [...]float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}

// storeShards is how many copies of the counts storeTimes keeps: calls on
// two cores write the same one once in storeShards times.
const storeShards = 8

// storeTimes is sluice_store_duration_seconds, the histogram every store
// call (every decision) observes. A prometheus histogram makes four atomic
// writes to words every core shares per observation; storeTimes spreads its
// counts over shards picked at random, each on cache lines of its own, and
// adds them up when scraped. A scrape reads the shards' counts one after
// another, so an observation made meanwhile may be in the count and not
// yet in the sum (one call's nanoseconds), never in a bucket and not in the
// count.
type storeTimes struct {
	desc   *prometheus.Desc
	bounds [len(storeBuckets)]time.Duration
	used   atomic.Bool // a store is instrumented: the series exist
	shards [storeShards]storeShard
}

// storeShard is one copy of the counts: per op, one per bucket and one
// past the last, and the sum of the times in nanoseconds.
type storeShard struct {
	ops [len(storeOps)]struct {
		counts [len(storeBuckets) + 1]atomic.Uint64
		sum    atomic.Int64
	}
	_ [64]byte // the next shard's first counts on a line of their own
}

func newStoreTimes() *storeTimes {
	t := &storeTimes{desc: prometheus.NewDesc("sluice_store_duration_seconds", "Time of store calls by operation (take, take_all, release, adjust).", []string{"op"}, nil)}
	for i, b := range storeBuckets {
		t.bounds[i] = time.Duration(b * float64(time.Second))
	}
	return t
}

// observe counts one call of op (an index of storeOps) that took d.
func (t *storeTimes) observe(op int, d time.Duration) {
	i := 0
	for i < len(t.bounds) && d > t.bounds[i] {
		i++
	}
	o := &t.shards[rand.Uint32()%storeShards].ops[op]
	o.counts[i].Add(1)
	o.sum.Add(int64(d))
}

func (t *storeTimes) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

func (t *storeTimes) Collect(ch chan<- prometheus.Metric) {
	if !t.used.Load() {
		return
	}
	for op, name := range storeOps {
		var counts [len(storeBuckets) + 1]uint64
		var sum int64
		for s := range t.shards {
			o := &t.shards[s].ops[op]
			sum += o.sum.Load()
			for i := range counts {
				counts[i] += o.counts[i].Load()
			}
		}
		buckets := make(map[float64]uint64, len(storeBuckets))
		total := uint64(0)
		for i, b := range storeBuckets {
			total += counts[i]
			buckets[b] = total
		}
		total += counts[len(storeBuckets)]
		ch <- prometheus.MustNewConstHistogram(t.desc, total, time.Duration(sum).Seconds(), buckets, name)
	}
}
