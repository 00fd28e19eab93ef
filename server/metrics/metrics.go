// Package metrics holds sluice serve's Prometheus metrics, on their own
// registry: decisions, the store's calls, reloads, connections, settles,
// the gateway's responses and upstream, the failover breaker, quota leases
// and load shedding. docs/metrics.md lists every series.
package metrics

import (
	"context"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/failover"
)

// Metrics are the server's Prometheus metrics, on their own registry.
// Every series whose labels are known when the server starts (the limits
// of the policy, the listeners, the configs, the outcomes) is exported
// from the start with a zero sample, so that rate() and increase() see
// the first event: docs/metrics.md lists them all.
type Metrics struct {
	Reg        *prometheus.Registry
	Decisions  *prometheus.CounterVec
	nearLimit  *prometheus.CounterVec
	delays     *prometheus.HistogramVec
	Waiting    *prometheus.GaugeVec
	storeTime  *storeTimes
	storeErrs  *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	lastReload *prometheus.GaugeVec
	breaker    prometheus.Gauge // registered only with a store behind a breaker
	Refused    *prometheus.CounterVec
	// Unauthorized counts requests refused for want of a token.
	Unauthorized *prometheus.CounterVec
	// settles and settledCost count costs known after the response.
	settles, settledCost *prometheus.CounterVec
	// soft counts keys that passed a limit's soft share.
	soft *prometheus.CounterVec
	// Responses, UpstreamTime and UpstreamErrs describe the gateway's
	// answers and its upstream.
	Responses    *prometheus.CounterVec
	UpstreamTime prometheus.Histogram
	UpstreamErrs prometheus.Counter
}

// delayBuckets are the buckets of shaping delays, in seconds: from a
// millisecond to the longest max_delay worth having.
var delayBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New makes the metrics of a server of version.
func New(version string) *Metrics {
	m := &Metrics{Reg: prometheus.NewRegistry()}
	m.Decisions = counterVec("sluice_decisions_total", "Decisions by source (gateway, api, rls), deciding limit and outcome (admitted, delayed, refused, failed, admitted_uncounted, invalid; shadow_admitted and shadow_refused for each shadow limit checked); degraded=true marks decisions made without the configured store (by the fallback, or admitted uncounted or refused by a failure mode).", "source", "limit", "outcome", "degraded")
	m.storeTime = newStoreTimes()
	m.storeErrs = counterVec("sluice_store_errors_total", "Store calls that failed, by operation.", "op")
	m.reloads = counterVec("sluice_config_reloads_total", "Loads of the policy and RLS configs by result (ok, error); a failed load keeps the previous config serving.", "config", "result")
	m.lastReload = gaugeVec("sluice_config_last_success_timestamp_seconds", "When each config last loaded successfully (Unix time).", "config")
	m.breaker = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_failover_breaker_state",
		Help: "The circuit breaker in front of Redis: 0 closed (normal), 1 open (Redis bypassed), 2 half-open (probing).",
	})
	m.Refused = counterVec("sluice_connections_refused_total", "Connections refused because their listener (gateway, api, grpc, admin) held max_conns already.", "listener")
	m.Unauthorized = counterVec("sluice_unauthorized_total", "Requests answered 401 for want of a valid token, by listener (api, admin).", "listener")
	m.settles = counterVec("sluice_settles_total", "Costs known after the response, settled by source (gateway, api), limit and result: reported, capped (above the limit's max), missing (on_missing decided, or an LLM answer without usage charged an estimate), failed (the store failed; the reservation stands).", "source", "limit", "result")
	m.soft = counterVec("sluice_soft_limit_passed_total", "Keys a request or a settle took past their limit's soft share (soft: in the policy), by source and limit.", "source", "limit")
	m.settledCost = counterVec("sluice_settled_cost_total", "What settles charged in all (the actual costs: tokens, rows, bytes), by source and limit.", "source", "limit")
	m.newGatewayMetrics()
	info := gaugeVec("sluice_build_info", "Always 1; the labels tell the version of sluice serving and the Go version it was built with.", "version", "goversion")
	info.WithLabelValues(version, runtime.Version()).Set(1)
	for _, code := range []string{"200", "400", "429", "431", "502", "503"} {
		m.Responses.WithLabelValues(code) // the codes alerts watch, from zero
	}
	m.Reg.MustRegister(m.Decisions, m.nearLimit, m.delays, m.storeTime, m.storeErrs, m.reloads, m.lastReload, m.Refused, m.Unauthorized, m.settles, m.settledCost, m.soft, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// counterVec, gaugeVec and histogramVec make a family of series from its
// name, help and label names.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// newGatewayMetrics makes the series of decisions beyond their outcome
// and of the gateway (registered by WatchGateway).
func (m *Metrics) newGatewayMetrics() {
	m.nearLimit = counterVec("sluice_near_limit_total", "Admitted decisions that left at least 80% of the deciding limit used, by source and limit.", "source", "limit")
	m.delays = histogramVec("sluice_shaping_delay_seconds", "Delays given to admitted requests by shaping limits (leaky_bucket), by source; sluice_decisions_total{outcome=\"delayed\"} tells which limits delay.", delayBuckets, "source")
	m.Waiting = gaugeVec("sluice_gateway_waiting_requests", "Requests the gateway holds while they wait for a shaping delay or for room under a limit, by limit.", "limit")
	m.Responses = counterVec("sluice_gateway_responses_total", "Responses of the gateway by HTTP status code: its own refusals (429, 503, 400, 431) and what the upstream answered.", "code")
	m.UpstreamTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_upstream_duration_seconds",
		Help:    "Time from sending a request upstream to receiving its response headers (or failing).",
		Buckets: prometheus.ExponentialBuckets(.001, 2.5, 12), // 1 ms to 24 s
	})
	m.UpstreamErrs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_upstream_errors_total",
		Help: "Requests the gateway answered 502 because the upstream could not be reached or failed before its response headers.",
	})
}

// WatchGateway registers the gateway's series: responses, waiting
// requests, the upstream's latency and errors (which stay at zero with
// the built-in demo upstream).
func (m *Metrics) WatchGateway() {
	m.Reg.MustRegister(m.Responses, m.Waiting, m.UpstreamTime, m.UpstreamErrs)
}

// KnownLimits gives every series of source's limits a zero sample: each
// outcome the source can give (shadow outcomes for shadow limits), and
// near-limit decisions where it reports them.
func (m *Metrics) KnownLimits(source string, limits []KnownLimit) {
	enforced := []string{"admitted", "delayed", "refused", "failed", "admitted_uncounted", "invalid"}
	if source == "rls" { // it neither delays nor reports what is left of a limit
		enforced = []string{"admitted", "refused"}
	} else {
		m.delays.WithLabelValues(source)
	}
	shadow := []string{"shadow_admitted", "shadow_refused"}
	for _, l := range limits {
		outs := enforced
		switch {
		case l.Shadow:
			outs = shadow
		case source != "rls":
			m.nearLimit.WithLabelValues(source, l.Name)
		}
		if source == "gateway" && !l.Shadow {
			m.Waiting.WithLabelValues(l.Name)
		}
		for _, o := range outs {
			m.Decisions.WithLabelValues(source, l.Name, o, "false")
		}
		if l.Late {
			for _, r := range settleResults {
				m.settles.WithLabelValues(source, l.Name, r)
			}
			m.settledCost.WithLabelValues(source, l.Name)
		}
	}
}

// KnownLimit is a limit named in a config.
type KnownLimit struct {
	Name   string
	Shadow bool
	Late   bool // its cost is settled after the response
}

// settleResults are the results sluice_settles_total counts.
var settleResults = []string{"reported", "capped", "missing", "failed"}

// Observe counts one decision.
func (m *Metrics) Observe(source string, o decide.Observation) {
	degraded := "false"
	if o.Decision.Degraded || o.Outcome == decide.AdmittedUncounted {
		degraded = "true"
	}
	m.Decisions.WithLabelValues(source, o.Limit, o.Outcome.String(), degraded).Inc()
	if decide.NearLimit(o) {
		m.nearLimit.WithLabelValues(source, o.Limit).Inc()
	}
	if o.Outcome == decide.Delayed && o.Decision.Delay > 0 {
		m.delays.WithLabelValues(source).Observe(o.Decision.Delay.Seconds())
	}
}

// BreakerChanged is failover's OnStateChange: the breaker state gauge.
func (m *Metrics) BreakerChanged(from, to failover.State) {
	m.breaker.Set(float64(to))
}

// WatchFailover exports a failover.Store's counters and its breaker.
func (m *Metrics) WatchFailover(fs *failover.Store) {
	counter := func(name, help string, v func(failover.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(fs.Stats())) })
	}
	m.Reg.MustRegister(
		m.breaker,
		counter("sluice_failover_calls_total", "Calls that reached the primary store (Redis).", func(s failover.Stats) int64 { return s.Calls }),
		counter("sluice_failover_failures_total", "Calls to the primary store that failed (timeouts, connection errors, error replies).", func(s failover.Stats) int64 { return s.Failures }),
		counter("sluice_failover_short_circuited_total", "Calls that did not reach the primary store because the breaker was open.", func(s failover.Stats) int64 { return s.ShortCircuited }),
		counter("sluice_failover_breaker_opens_total", "Times the circuit breaker opened.", func(s failover.Stats) int64 { return s.Opens }),
	)
	degraded := map[string]func(failover.Stats) int64{
		"open":     func(s failover.Stats) int64 { return s.DegradedOpen },
		"closed":   func(s failover.Stats) int64 { return s.DegradedClosed },
		"fallback": func(s failover.Stats) int64 { return s.DegradedFallback },
	}
	for mode, v := range degraded {
		m.Reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_failover_degraded_total", Help: "Requests decided without the primary store, by failure mode.", ConstLabels: prometheus.Labels{"mode": mode},
		}, func() float64 { return float64(v(fs.Stats())) }))
	}
	m.breaker.Set(float64(fs.State()))
}

// KnownConfig gives a config's reload series their zero samples.
func (m *Metrics) KnownConfig(config string) {
	m.reloads.WithLabelValues(config, "ok")
	m.reloads.WithLabelValues(config, "error")
}

// Reloaded counts one load of a config.
func (m *Metrics) Reloaded(config string, err error) {
	if err != nil {
		m.reloads.WithLabelValues(config, "error").Inc()
		return
	}
	m.reloads.WithLabelValues(config, "ok").Inc()
	m.lastReload.WithLabelValues(config).SetToCurrentTime()
}

// instrumented times a store's calls and counts its errors.
type instrumented struct {
	sluice.Store
	take, takeAll, release, adjust storeOp
}

// storeOp is the series of one store operation: its time and its errors.
type storeOp struct {
	times *storeTimes
	op    int // its index in storeOps
	errs  prometheus.Counter
}

// done records one call that started at start and returned err.
func (o storeOp) done(start time.Time, err error) {
	o.times.observe(o.op, time.Since(start))
	if err != nil {
		o.errs.Inc()
	}
}

func (m *Metrics) Instrument(s sluice.Store) sluice.Store {
	m.storeTime.used.Store(true)
	op := func(i int) storeOp {
		return storeOp{m.storeTime, i, m.storeErrs.WithLabelValues(storeOps[i])}
	}
	return &instrumented{Store: s, take: op(0), takeAll: op(1), release: op(2), adjust: op(3)}
}

// Adjust settles a late cost (decision API, gateway) if the store can.
func (s *instrumented) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	a, ok := s.Store.(sluice.Adjuster)
	if !ok {
		return sluice.New(s.Store).Adjust(ctx, r) // ErrNotAdjustable, worded by sluice
	}
	start := time.Now()
	d, err := a.Adjust(ctx, r)
	s.adjust.done(start, err)
	return d, err
}

func (s *instrumented) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.Store.Take(ctx, r)
	s.take.done(start, err)
	return d, err
}

func (s *instrumented) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	start := time.Now()
	err := s.Store.TakeAll(ctx, rs, ds)
	s.takeAll.done(start, err)
	return err
}

func (s *instrumented) Release(ctx context.Context, r sluice.Request, lease uint64) error {
	start := time.Now()
	err := s.Store.Release(ctx, r, lease)
	s.release.done(start, err)
	return err
}

// SoftLimit counts a key that passed a limit's soft share.
func (m *Metrics) SoftLimit(source, limit string) {
	m.soft.WithLabelValues(source, limit).Inc()
}

// Settled counts one settle of a cost known after the response.
func (m *Metrics) Settled(source, limit string, actual int64, found, capped bool, err error) {
	result := "reported"
	switch {
	case err != nil:
		result = "failed"
	case capped:
		result = "capped"
	case !found:
		result = "missing"
	}
	m.settles.WithLabelValues(source, limit, result).Inc()
	if err == nil {
		m.settledCost.WithLabelValues(source, limit).Add(float64(actual))
	}
}
