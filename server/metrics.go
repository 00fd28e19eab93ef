package server

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/failover"
)

// metrics are the server's Prometheus metrics, on their own registry.
type metrics struct {
	reg        *prometheus.Registry
	decisions  *prometheus.CounterVec
	storeTime  *prometheus.HistogramVec
	storeErrs  *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	lastReload *prometheus.GaugeVec
	breaker    prometheus.Gauge
	refused    *prometheus.CounterVec
	// unauthorized counts requests refused for want of a token.
	unauthorized *prometheus.CounterVec
	// settles and settledCost count costs known after the response.
	settles, settledCost *prometheus.CounterVec
}

func newMetrics(version string) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decisions_total",
		Help: "Decisions by source (gateway, api, rls), deciding limit and outcome (admitted, delayed, refused, shadow_refused, failed); degraded=true marks decisions made without the configured store.",
	}, []string{"source", "limit", "outcome", "degraded"})
	m.storeTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_store_duration_seconds",
		Help:    "Time of store calls by operation (take, take_all, release, adjust).",
		Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
	}, []string{"op"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_errors_total",
		Help: "Store calls that failed, by operation.",
	}, []string{"op"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_config_reloads_total",
		Help: "Loads of the policy and RLS configs by result (ok, error); a failed load keeps the previous config serving.",
	}, []string{"config", "result"})
	m.lastReload = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_config_last_success_timestamp_seconds",
		Help: "When each config last loaded successfully (Unix time).",
	}, []string{"config"})
	m.breaker = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_failover_breaker_state",
		Help: "The circuit breaker in front of Redis: 0 closed (normal), 1 open (Redis bypassed), 2 half-open (probing).",
	})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_connections_refused_total",
		Help: "Connections refused because their listener (gateway, api, grpc, admin) held max_conns already.",
	}, []string{"listener"})
	m.unauthorized = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_unauthorized_total",
		Help: "Requests answered 401 for want of a valid token, by listener (api, admin).",
	}, []string{"listener"})
	m.settles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_settles_total",
		Help: "Costs known after the response, settled by source (gateway, api), limit and result: reported, capped (above the limit's max), missing (on_missing decided), failed (the store failed; the reservation stands).",
	}, []string{"source", "limit", "result"})
	m.settledCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_settled_cost_total",
		Help: "What settles charged in all (the actual costs: tokens, rows, bytes), by source and limit.",
	}, []string{"source", "limit"})
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "Always 1; the labels tell the version of sluice serving.",
	}, []string{"version"})
	info.WithLabelValues(version).Set(1)
	m.reg.MustRegister(m.decisions, m.storeTime, m.storeErrs, m.reloads, m.lastReload, m.breaker, m.refused, m.unauthorized, m.settles, m.settledCost, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// breakerChanged is failover's OnStateChange: the breaker state gauge.
func (m *metrics) breakerChanged(from, to failover.State) {
	m.breaker.Set(float64(to))
}

// watchFailover exports a failover.Store's counters.
func (m *metrics) watchFailover(fs *failover.Store) {
	counter := func(name, help string, v func(failover.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(fs.Stats())) })
	}
	m.reg.MustRegister(
		counter("sluice_failover_calls_total", "Calls that reached the primary store (Redis).", func(s failover.Stats) int64 { return s.Calls }),
		counter("sluice_failover_failures_total", "Calls to the primary store that failed (timeouts, connection errors, error replies).", func(s failover.Stats) int64 { return s.Failures }),
		counter("sluice_failover_short_circuited_total", "Calls that did not reach the primary store because the breaker was open.", func(s failover.Stats) int64 { return s.ShortCircuited }),
		counter("sluice_failover_breaker_opens_total", "Times the circuit breaker opened.", func(s failover.Stats) int64 { return s.Opens }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_failover_degraded_total", Help: "Requests decided without the primary store, by failure mode.", ConstLabels: prometheus.Labels{"mode": "open"},
		}, func() float64 { return float64(fs.Stats().DegradedOpen) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_failover_degraded_total", Help: "Requests decided without the primary store, by failure mode.", ConstLabels: prometheus.Labels{"mode": "closed"},
		}, func() float64 { return float64(fs.Stats().DegradedClosed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_failover_degraded_total", Help: "Requests decided without the primary store, by failure mode.", ConstLabels: prometheus.Labels{"mode": "fallback"},
		}, func() float64 { return float64(fs.Stats().DegradedFallback) }),
	)
	m.breaker.Set(float64(fs.State()))
}

// reloaded counts one load of a config.
func (m *metrics) reloaded(config string, err error) {
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
	take, takeAll, release          prometheus.Observer
	takeErr, takeAllErr, releaseErr prometheus.Counter
	adjust                          prometheus.Observer
	adjustErr                       prometheus.Counter
}

func (m *metrics) instrument(s sluice.Store) sluice.Store {
	return &instrumented{
		Store:      s,
		take:       m.storeTime.WithLabelValues("take"),
		takeAll:    m.storeTime.WithLabelValues("take_all"),
		release:    m.storeTime.WithLabelValues("release"),
		takeErr:    m.storeErrs.WithLabelValues("take"),
		takeAllErr: m.storeErrs.WithLabelValues("take_all"),
		releaseErr: m.storeErrs.WithLabelValues("release"),
		adjust:     m.storeTime.WithLabelValues("adjust"),
		adjustErr:  m.storeErrs.WithLabelValues("adjust"),
	}
}

// Adjust settles a late cost (decision API, gateway) if the store can.
func (s *instrumented) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	a, ok := s.Store.(sluice.Adjuster)
	if !ok {
		return sluice.New(s.Store).Adjust(ctx, r) // ErrNotAdjustable, worded by sluice
	}
	start := time.Now()
	d, err := a.Adjust(ctx, r)
	s.adjust.Observe(time.Since(start).Seconds())
	if err != nil {
		s.adjustErr.Inc()
	}
	return d, err
}

func (s *instrumented) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	start := time.Now()
	d, err := s.Store.Take(ctx, r)
	s.take.Observe(time.Since(start).Seconds())
	if err != nil {
		s.takeErr.Inc()
	}
	return d, err
}

func (s *instrumented) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	start := time.Now()
	err := s.Store.TakeAll(ctx, rs, ds)
	s.takeAll.Observe(time.Since(start).Seconds())
	if err != nil {
		s.takeAllErr.Inc()
	}
	return err
}

func (s *instrumented) Release(ctx context.Context, key string, l sluice.Limit, lease uint64) error {
	start := time.Now()
	err := s.Store.Release(ctx, key, l, lease)
	s.release.Observe(time.Since(start).Seconds())
	if err != nil {
		s.releaseErr.Inc()
	}
	return err
}

// outcomes are the outcomes the status page counts, in its order.
// Every decide.Outcome is here: one that is not would vanish from the page.
var outcomes = [nOutcomes]string{"admitted", "delayed", "refused", "shadow_refused", "degraded", "failed", "invalid"}

const nOutcomes = 7

// stats keeps what the status page shows: totals per (source, limit,
// outcome) and the keys refused most often. Both are bounded: at most
// maxTracked limits, and a fixed number of heavy keys. Keys are kept and
// shown masked (decide.MaskKey) unless the server shows keys.
type stats struct {
	mu     sync.RWMutex // guards limits; counters are atomic
	limits map[statsKey]*[nOutcomes]atomic.Int64
	heavyM sync.Mutex // guards heavy, taken on refusals only
	heavy  heavyKeys
	start  time.Time
	show   func(key string) string // what the page shows of a key
}

type statsKey struct{ source, limit string }

const maxTracked = 10_000

// newStats returns empty stats that show keys masked, or as they are with
// showKeys.
func newStats(showKeys bool) *stats {
	show := decide.MaskKey
	if showKeys {
		show = func(key string) string { return printable(decide.ShowKey(key)) }
	}
	return &stats{limits: map[statsKey]*[nOutcomes]atomic.Int64{}, heavy: heavyKeys{max: 32}, start: time.Now(), show: show}
}

// add counts one decision. Every decision passes here, so the common case
// takes a read lock and an atomic add, and allocates nothing.
func (s *stats) add(source, limit, outcome, key string) {
	i := 0
	for i < len(outcomes) && outcomes[i] != outcome {
		i++
	}
	if i == len(outcomes) {
		return
	}
	id := statsKey{source, limit}
	s.mu.RLock()
	c := s.limits[id]
	s.mu.RUnlock()
	if c == nil {
		s.mu.Lock()
		if c = s.limits[id]; c == nil && len(s.limits) < maxTracked {
			c = new([nOutcomes]atomic.Int64)
			s.limits[id] = c
		}
		s.mu.Unlock()
	}
	if c != nil {
		c[i].Add(1)
	}
	if outcome == "refused" && key != "" {
		key = s.show(key)
		s.heavyM.Lock()
		s.heavy.add(source+" "+limit, key)
		s.heavyM.Unlock()
	}
}

// limitStats is one row of the status page.
type limitStats struct {
	Source string           `json:"source"`
	Limit  string           `json:"limit"`
	Counts map[string]int64 `json:"counts"`
}

func (s *stats) snapshot() (rows []limitStats, heavy []heavyKey) {
	s.mu.RLock()
	for id, c := range s.limits {
		row := limitStats{Source: id.source, Limit: id.limit, Counts: map[string]int64{}}
		for i, o := range outcomes {
			row.Counts[o] = c[i].Load()
		}
		rows = append(rows, row)
	}
	s.mu.RUnlock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Source != rows[j].Source {
			return rows[i].Source < rows[j].Source
		}
		return rows[i].Limit < rows[j].Limit
	})
	s.heavyM.Lock()
	defer s.heavyM.Unlock()
	return rows, s.heavy.top()
}

// heavyKeys finds the keys refused most often with the Space-Saving
// algorithm: max counters; a new key takes over the smallest counter,
// inheriting its count as its possible overestimate. Any key refused more
// than total/max times is guaranteed to be present.
type heavyKeys struct {
	max   int
	items []heavyKey
}

type heavyKey struct {
	// Limit is the source and the limit's name ("gateway per-ip").
	Limit string `json:"limit"`
	// Key is the key's mask (decide.MaskKey), or, when the server shows
	// keys, its parts (decide.ShowKey) as printable text.
	Key   string `json:"key"`
	Count int64  `json:"count"`
	// Error is how much Count may overestimate.
	Error int64 `json:"error"`
}

// maxShownKey bounds the bytes of a key kept for display.
const maxShownKey = 200

// add counts one refusal of key (as shown) under limit.
func (h *heavyKeys) add(limit, key string) {
	for i := range h.items {
		if h.items[i].Limit == limit && h.items[i].Key == key {
			h.items[i].Count++
			return
		}
	}
	if len(h.items) < h.max {
		h.items = append(h.items, heavyKey{Limit: limit, Key: key, Count: 1})
		return
	}
	min := 0
	for i := range h.items {
		if h.items[i].Count < h.items[min].Count {
			min = i
		}
	}
	c := h.items[min].Count
	h.items[min] = heavyKey{Limit: limit, Key: key, Count: c + 1, Error: c}
}

func (h *heavyKeys) top() []heavyKey {
	out := append([]heavyKey(nil), h.items...)
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// printable shows a store key (which may hold separators and length
// prefixes) as text, bounded in length.
func printable(key string) string {
	if len(key) > maxShownKey {
		key = key[:maxShownKey]
	}
	b := make([]byte, 0, len(key))
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 0x20 && c < 0x7f:
			b = append(b, c)
		case c == 0:
			b = append(b, '|')
		default:
			b = append(b, `\x`...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
	}
	return string(b)
}

// settled counts one settle of a cost known after the response.
func (m *metrics) settled(source, limit string, actual int64, found, capped bool, err error) {
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
