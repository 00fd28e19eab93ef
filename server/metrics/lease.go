package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/redisstore"
)

// leaseCollector exports the Redis store's quota leases
// (redisstore.LeaseStats), one snapshot per scrape.
type leaseCollector struct {
	stats                      func() redisstore.LeaseStats
	calls, units, local, waits *prometheus.Desc
	sizes, held, bound, keys   *prometheus.Desc
}

func NewLeaseCollector(stats func() redisstore.LeaseStats) *leaseCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &leaseCollector{
		stats: stats,
		calls: d("sluice_lease_calls_total", "Lease calls to Redis by result: granted, refused (Redis had too little left), failed.", "result"),
		units: d("sluice_lease_units_total", "Units that left the leases by fate: spent (admitted), returned (given back to Redis), expired (their fixed window ended, or their key was reset), lost (a give-back failed).", "fate"),
		local: d("sluice_lease_local_requests_total", "Checks (a request under every limit it is checked against) admitted from units their leases held, without a Redis call of their own: the script calls leases saved."),
		waits: d("sluice_lease_waits_total", "Checks that waited for a lease call made for other requests: a lease ran dry before the call refilling it returned."),
		sizes: d("sluice_lease_size_units", "Leases granted by how many units each held; the sum is every unit Redis handed out."),
		held:  d("sluice_lease_held_units", "Units the leases hold now, unspent: what this instance would lose if it died now."),
		bound: d("sluice_lease_bound_units", "The most the leases may hold at once now: Capacity/Share for each key with a lease, the bound on what this instance can lose."),
		keys:  d("sluice_lease_keys", "Keys with a lease now (at most store.redis.leases.keys)."),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.units, c.local, c.waits, c.sizes, c.held, c.bound, c.keys} {
		ch <- d
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter(c.calls, st.Calls-st.Refused-st.Failed, "granted")
	counter(c.calls, st.Refused, "refused")
	counter(c.calls, st.Failed, "failed")
	counter(c.units, st.Spent, "spent")
	counter(c.units, st.Returned, "returned")
	counter(c.units, st.Expired, "expired")
	counter(c.units, st.Lost, "lost")
	counter(c.local, st.Local)
	counter(c.waits, st.Waits)
	gauge(c.held, st.Held)
	gauge(c.bound, st.Bound)
	gauge(c.keys, int64(st.Keys))
	ch <- prometheus.MustNewConstHistogram(c.sizes, uint64(st.Leases), float64(st.Units), sizeBuckets(st.Sizes))
}

// sizeBuckets turns LeaseStats.Sizes into a histogram's cumulative
// buckets: upper bounds 1, 2, 4, … 2^(LeaseSizeBuckets-2); the last count
// is left to +Inf.
func sizeBuckets(sizes [redisstore.LeaseSizeBuckets]int64) map[float64]uint64 {
	b := make(map[float64]uint64, len(sizes)-1)
	var n uint64
	for i, v := range sizes[:len(sizes)-1] {
		n += uint64(v)
		b[math.Ldexp(1, i)] = n
	}
	return b
}
