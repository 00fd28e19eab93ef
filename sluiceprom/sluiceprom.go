// Package sluiceprom exports the decisions of sluice's middleware as
// Prometheus metrics, for services that use httplimit or grpclimit without
// sluice serve. A Collector is fed by the middleware's Observe hook and
// registered like any other collector:
//
//	m := sluiceprom.New(sluiceprom.Config{Limits: []string{"per-ip"}})
//	prometheus.MustRegister(m)
//	limit, err := httplimit.New(limiter, httplimit.Config{
//		Limits:    limits,
//		Observe:   m.ObserveHTTP,
//		OnWaiting: m.OnWaiting,
//	})
//
// The series have the names and labels of sluice serve's (docs/metrics.md),
// without its source label, so the same dashboards and alerts apply:
//
//	sluice_decisions_total{limit, outcome, degraded}
//	sluice_near_limit_total{limit}
//	sluice_shaping_delay_seconds             (histogram)
//	sluice_waiting_requests{limit}           (gauge)
//
// Label values are limit names, which come from the program's configuration,
// never from requests, so the number of series is bounded.
package sluiceprom

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/decide"
)

// Config configures a Collector. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// Namespace starts every metric name. Default "sluice".
	Namespace string
	// ConstLabels are added to every series, e.g. {"service": "checkout"}.
	// Default none.
	ConstLabels prometheus.Labels
	// Limits are the names of the limits known up front: their counters
	// are exported from zero, so that increase() sees their first
	// decision. Default none (series appear with their first decision).
	Limits []string
	// DelayBuckets are the buckets of the shaping delay histogram, in
	// seconds. Default 1 ms to 10 s.
	DelayBuckets []float64
}

// Collector counts decisions for Prometheus. It is safe for concurrent
// use; each observation costs a few atomic adds and a label lookup, and
// allocates nothing once its series exist.
type Collector struct {
	decisions *prometheus.CounterVec
	nearLimit *prometheus.CounterVec
	delays    prometheus.Histogram
	waiting   *prometheus.GaugeVec
}

var _ prometheus.Collector = (*Collector)(nil)

// enforced are the outcomes of enforced limits, exported from zero.
var enforced = []decide.Outcome{decide.Admitted, decide.Delayed, decide.Refused, decide.Failed, decide.AdmittedUncounted, decide.Invalid}

// New returns a Collector for cfg.
func New(cfg Config) *Collector {
	if cfg.Namespace == "" {
		cfg.Namespace = "sluice"
	}
	if cfg.DelayBuckets == nil {
		cfg.DelayBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	}
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.Namespace, Name: "decisions_total", ConstLabels: cfg.ConstLabels,
			Help: "Decisions by deciding limit and outcome (admitted, delayed, refused, failed, admitted_uncounted, invalid; shadow_admitted and shadow_refused for each shadow limit checked); degraded=true marks decisions made without the configured store (by the fallback, or admitted uncounted or refused by a failure mode).",
		}, []string{"limit", "outcome", "degraded"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.Namespace, Name: "near_limit_total", ConstLabels: cfg.ConstLabels,
			Help: "Admitted decisions that left at least 80% of the deciding limit used, by limit.",
		}, []string{"limit"}),
		delays: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: cfg.Namespace, Name: "shaping_delay_seconds", ConstLabels: cfg.ConstLabels, Buckets: cfg.DelayBuckets,
			Help: "Delays given to admitted requests by shaping limits (leaky_bucket); decisions_total{outcome=\"delayed\"} tells which limits delay.",
		}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.Namespace, Name: "waiting_requests", ConstLabels: cfg.ConstLabels,
			Help: "Requests held while they wait for a shaping delay or for room under a limit, by limit.",
		}, []string{"limit"}),
	}
	for _, l := range cfg.Limits {
		for _, o := range enforced {
			c.decisions.WithLabelValues(l, o.String(), "false")
		}
		c.nearLimit.WithLabelValues(l)
		c.waiting.WithLabelValues(l)
	}
	return c
}

// Observe counts one observation of the middleware (see
// decide.Observation).
func (c *Collector) Observe(o decide.Observation) {
	degraded := "false"
	if o.Decision.Degraded || o.Outcome == decide.AdmittedUncounted {
		degraded = "true"
	}
	c.decisions.WithLabelValues(o.Limit, o.Outcome.String(), degraded).Inc()
	if decide.NearLimit(o) {
		c.nearLimit.WithLabelValues(o.Limit).Inc()
	}
	if o.Outcome == decide.Delayed && o.Decision.Delay > 0 {
		c.delays.Observe(o.Decision.Delay.Seconds())
	}
}

// ObserveHTTP is Observe as httplimit.Config.Observe takes it.
func (c *Collector) ObserveHTTP(_ *http.Request, o decide.Observation) { c.Observe(o) }

// ObserveGRPC is Observe as grpclimit.Config.Observe takes it.
func (c *Collector) ObserveGRPC(_ context.Context, _ string, o decide.Observation) { c.Observe(o) }

// OnWaiting counts requests waiting under a limit, as
// httplimit.Config.OnWaiting and grpclimit.Config.OnWaiting take it.
func (c *Collector) OnWaiting(limit string, delta int) {
	c.waiting.WithLabelValues(limit).Add(float64(delta))
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.nearLimit.Describe(ch)
	c.delays.Describe(ch)
	c.waiting.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.nearLimit.Collect(ch)
	c.delays.Collect(ch)
	c.waiting.Collect(ch)
}
