package server

import (
	"net/http"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/shed"
)

// shedding is the adaptive load shedding of one listener (the gateway, the
// decision API): the policy's shed: section applied with a shed.Limiter of
// its own. The Limiter is made when a policy with the section is first
// seen and made anew when a reload changes the section (its estimate and
// counters start over); without the section requests pass untouched.
type shedding struct {
	name     string
	priority shed.HTTPPriority
	next     http.Handler

	mu  sync.Mutex // serialises making a Limiter
	cur atomic.Pointer[shedLimiter]
}

// shedLimiter is a Limiter and the section it was made from.
type shedLimiter struct {
	cfg policy.Shed
	lim *shed.Limiter
	h   http.Handler // lim's middleware around next
}

// shedding wraps next, the handler of listener name, in the load shedding
// of each request's policy (policyOf), with requests' priorities from
// priority.
func (s *Server) shedding(name string, policyOf func(*http.Request) *policy.Policy, priority shed.HTTPPriority, next http.Handler) http.Handler {
	sh := &shedding{name: name, priority: priority, next: next}
	s.shedMu.Lock()
	s.sheds = append(s.sheds, sh)
	s.shedMu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sh.handler(policyOf(r).Shed).ServeHTTP(w, r)
	})
}

// handler returns the handler for the section cfg (nil: none).
func (sh *shedding) handler(cfg *policy.Shed) http.Handler {
	if cfg == nil {
		return sh.next
	}
	if cur := sh.cur.Load(); cur != nil && cur.cfg == *cfg {
		return cur.h
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur := sh.cur.Load(); cur != nil && cur.cfg == *cfg {
		return cur.h
	}
	lim, err := shed.New(cfg.Config())
	if err != nil { // the policy validated the section: a defect
		return sh.next
	}
	cur := &shedLimiter{cfg: *cfg, lim: lim, h: lim.Middleware(sh.priority)(sh.next)}
	sh.cur.Store(cur)
	return cur.h
}

// stats returns the Limiter's stats, ok false while there is none.
func (sh *shedding) stats() (st shed.Stats, ok bool) {
	cur := sh.cur.Load()
	if cur == nil {
		return st, false
	}
	return cur.lim.Stats(), true
}

// shedStats returns the stats of each listener's load shedding in force,
// by listener, for the status page.
func (s *Server) shedStats() map[string]shed.Stats {
	s.shedMu.Lock()
	defer s.shedMu.Unlock()
	var out map[string]shed.Stats
	for _, sh := range s.sheds {
		if st, ok := sh.stats(); ok && s.currentPolicy().Shed != nil {
			if out == nil {
				out = map[string]shed.Stats{}
			}
			out[sh.name] = st
		}
	}
	return out
}

// shedCollector exports the load shedding's state as Prometheus metrics.
type shedCollector struct{ s *Server }

var (
	shedLimitDesc = prometheus.NewDesc("sluice_shed_limit",
		"The adaptive in-flight limit of load shedding, by listener (gateway, api) and algorithm.", []string{"listener", "algorithm"}, nil)
	shedInFlightDesc = prometheus.NewDesc("sluice_shed_in_flight",
		"Requests in flight under load shedding, by listener.", []string{"listener"}, nil)
	shedWaitingDesc = prometheus.NewDesc("sluice_shed_waiting",
		"Critical requests waiting for a slot, by listener.", []string{"listener"}, nil)
	shedRTTDesc = prometheus.NewDesc("sluice_shed_latency_seconds",
		"The mean latency of the last sample (kind=last) and the smallest sampled (kind=no_load), by listener.", []string{"listener", "kind"}, nil)
	shedCPUDesc = prometheus.NewDesc("sluice_shed_cpu_usage",
		"The CPU usage the load shedding's CPU gate last measured (shed.cpu_threshold), a share of the CPUs sluice may use; absent without a gate or where usage cannot be read.", []string{"listener"}, nil)
	shedRequestsDesc = prometheus.NewDesc("sluice_shed_requests_total",
		"Requests by listener, priority and outcome (admitted, shed); counts start over when a reload changes the shed section.", []string{"listener", "priority", "outcome"}, nil)
)

func (shedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{shedLimitDesc, shedInFlightDesc, shedWaitingDesc, shedRTTDesc, shedCPUDesc, shedRequestsDesc} {
		ch <- d
	}
}

func (c shedCollector) Collect(ch chan<- prometheus.Metric) {
	stats := c.s.shedStats()
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Strings(names)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, name := range names {
		st := stats[name]
		gauge(shedLimitDesc, float64(st.Limit), name, st.Algorithm)
		gauge(shedInFlightDesc, float64(st.InFlight), name)
		gauge(shedWaitingDesc, float64(st.Waiting), name)
		gauge(shedRTTDesc, st.RTT.Seconds(), name, "last")
		gauge(shedRTTDesc, st.NoLoad.Seconds(), name, "no_load")
		if st.CPU >= 0 {
			gauge(shedCPUDesc, st.CPU, name)
		}
		for _, cl := range st.Classes {
			ch <- prometheus.MustNewConstMetric(shedRequestsDesc, prometheus.CounterValue, float64(cl.Admitted), name, cl.Priority, "admitted")
			ch <- prometheus.MustNewConstMetric(shedRequestsDesc, prometheus.CounterValue, float64(cl.Shed), name, cl.Priority, "shed")
		}
	}
}
