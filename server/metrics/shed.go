package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/shed"
)

// shedCollector exports the load shedding's state as Prometheus metrics.
type shedCollector struct{ stats func() map[string]shed.Stats }

// ShedCollector exports the stats of each listener's load shedding
// (stats, by listener).
func ShedCollector(stats func() map[string]shed.Stats) prometheus.Collector {
	return shedCollector{stats}
}

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
	stats := c.stats()
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
