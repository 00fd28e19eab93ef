// Package envoy serves Envoy's rate limit service from sluice serve: the
// descriptor configs (package rls) loaded and reloaded, its decisions
// counted in the metrics and on the status page, the gRPC service with
// its health, and envoyproxy/ratelimit's HTTP endpoints (/json,
// /healthcheck).
package envoy

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/metrics"
	"github.com/sluicehq/sluice/server/rls"
)

// Deps are what the service needs of the server.
type Deps struct {
	Limiter *sluice.Limiter
	Logger  *slog.Logger
	KeyText func(key string) string
	// Registry takes the service's own series; Decisions is
	// sluice_decisions_total, counted under source "rls".
	Registry  *prometheus.Registry
	Decisions *prometheus.CounterVec
	// Observe counts a decision on the status page.
	Observe func(decide.Observation)
	// Runtime is the table of runtime overrides (rls.Options.Runtime).
	Runtime decide.Runtime
}

// Service mounts package rls: the descriptor configs at paths, reloaded
// on demand, decisions counted under source "rls" with the limit label
// "domain/descriptor path" (bounded by the configs, never by clients).
type Service struct {
	svc    *rls.Service
	cfg    Config
	paths  []string
	opts   rls.LoadOptions
	log    *slog.Logger
	health *health.Server // nil until RegisterGRPC
}

// New loads the configs at paths (none: every descriptor is OK, as in
// envoyproxy/ratelimit) and returns the service.
func New(cfg Config, paths []string, deps Deps) (*Service, error) {
	var rc *rls.Config
	opts := rls.LoadOptions{MergeDomains: cfg.MergeDomains}
	if len(paths) > 0 {
		var err error
		if rc, err = load(deps.Logger, opts, paths); err != nil {
			return nil, err
		}
		deps.Logger.Info("rls: loaded", "domains", rc.Domains(), "config", rc.String())
	}
	counting, err := cfg.ParseCounting()
	if err != nil {
		return nil, err
	}
	svc, err := rls.New(deps.Limiter, rc, rls.Options{
		Logger:                     deps.Logger,
		KeyText:                    deps.KeyText,
		Runtime:                    deps.Runtime,
		ResponseHeaders:            cfg.responseHeaders(),
		Counting:                   counting,
		StopIncrementWhenOverLimit: cfg.StopIncrementWhenOverLimit,
		ShadowMode:                 cfg.ShadowMode,
		QuotaMode:                  cfg.QuotaMode,
		Bounds:                     cfg.Bounds(),
		Observe:                    newRLSObserver(deps).observe,
	})
	if err != nil {
		return nil, err
	}
	return &Service{svc: svc, cfg: cfg, paths: paths, opts: opts, log: deps.Logger}, nil
}

// rlsObserver counts RLS decisions under source "rls" with the limit label
// "domain/descriptor path" (bounded by the configs, never by clients). It
// keeps each limit's label and counters, so that a decision costs no
// string building and no label lookup.
type rlsObserver struct {
	deps   Deps
	hits   *prometheus.CounterVec // sluice_rls_hits_total
	limits sync.Map               // rlsLimit -> *rlsCounters
	n      atomic.Int64
}

type rlsLimit struct{ domain, rule string }

// rlsCounters are one limit's label and its counters by outcome (admitted,
// refused, shadow refused) and degraded (false, true).
type rlsCounters struct {
	limit string
	key   string // the status page's key of a refusal, but for the value
	c     [4][2]prometheus.Counter
	hits  [3]prometheus.Counter // within, near, over
}

// maxRLSLimits bounds the limits kept: reloads can add new ones for
// ever; past the bound, decisions are counted without the cache.
const maxRLSLimits = 4096

var rlsOutcomes = [4]decide.Outcome{decide.Admitted, decide.Refused, decide.ShadowRefused, decide.ShadowAdmitted}

func newRLSObserver(deps Deps) *rlsObserver {
	hits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rls_hits_total",
		Help: "Hits of RLS descriptors counted as envoyproxy/ratelimit counts them (--rls-counting peer), by limit and range, as its within_limit, near_limit (past 80% of the limit) and over_limit statistics.",
	}, []string{"limit", "range"})
	deps.Registry.MustRegister(hits)
	return &rlsObserver{deps: deps, hits: hits}
}

func (r *rlsObserver) observe(domain string, o rls.Outcome) {
	i := 0
	switch o.Result {
	case rls.ResultOK:
		if o.Shadow {
			i = 3
		}
	case rls.ResultOverLimit:
		i = 1
	case rls.ResultShadowOverLimit:
		i = 2
	default:
		return // no limit, unlimited, replaced, or not charged because another refused
	}
	c := r.counters(domain, o.Rule)
	d := 0
	if o.Degraded {
		d = 1
	}
	c.c[i][d].Inc()
	for j, n := range [3]uint64{o.Within, o.Near, o.Over} {
		if n > 0 {
			c.hits[j].Add(float64(n))
		}
	}
	ob := decide.Observation{Limit: c.limit, Outcome: rlsOutcomes[i], Decision: sluice.Decision{Degraded: o.Degraded}}
	if ob.Outcome == decide.Refused {
		// What the status page lists of a refused key: the value of the
		// descriptor's last entry, which the service reports only for
		// detailed_metric limits.
		ob.Key = c.key
		if o.Value != "" {
			ob.Key = string(decide.AppendKeyPart([]byte(c.key), o.Value))
		}
	}
	r.deps.Observe(ob)
}

// counters returns the label and counters of a limit.
func (r *rlsObserver) counters(domain, rule string) *rlsCounters {
	id := rlsLimit{domain, rule}
	if c, ok := r.limits.Load(id); ok {
		return c.(*rlsCounters)
	}
	c := &rlsCounters{limit: domain + "/" + rule, key: string(decide.AppendKey(nil, "", "rls", rule))}
	for i, o := range rlsOutcomes {
		for d, degraded := range []string{"false", "true"} {
			c.c[i][d] = r.deps.Decisions.WithLabelValues("rls", c.limit, o.String(), degraded)
		}
	}
	for j, rng := range []string{"within", "near", "over"} {
		c.hits[j] = r.hits.WithLabelValues(c.limit, rng)
	}
	if r.n.Load() < maxRLSLimits {
		if _, loaded := r.limits.LoadOrStore(id, c); !loaded {
			r.n.Add(1)
		}
	}
	return c
}

// load reads the RLS configs and logs their warnings (what
// envoyproxy/ratelimit accepts and sluice check --strict refuses).
func load(log *slog.Logger, opts rls.LoadOptions, paths []string) (*rls.Config, error) {
	cfg, err := rls.LoadConfigWith(opts, paths...)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		log.Warn("rls: config warning", "warning", w.Error())
	}
	return cfg, nil
}

// Reload loads the configs again; one that fails to load keeps the old
// one serving. It updates the gRPC health of "ratelimit" either way.
func (s *Service) Reload() error {
	defer s.setHealth()
	if len(s.paths) == 0 {
		return nil
	}
	cfg, err := load(s.log, s.opts, s.paths)
	if err != nil {
		return err // the old config stays
	}
	s.svc.Swap(cfg)
	return nil
}

// Limits returns the names (domain/descriptor path, as the metrics label
// them) of the configured limits.
func (s *Service) Limits() []metrics.KnownLimit {
	var out []metrics.KnownLimit
	for _, l := range s.svc.Config().Limits() {
		out = append(out, metrics.KnownLimit{Name: l.Domain + "/" + l.Path, Shadow: l.Shadow})
	}
	return out
}

// Named returns the limit of the rate_limit named name, for runtime
// overrides (rls.Config.Named).
func (s *Service) Named(name string) (sluice.Limit, bool) { return s.svc.Config().Named(name) }

// Domains returns the domains loaded.
func (s *Service) Domains() []string {
	if c := s.svc.Config(); c != nil {
		return c.Domains()
	}
	return nil
}

// Close writes the aggregated log lines still pending.
func (s *Service) Close() { s.svc.Close() }

// Drain makes the gRPC health checks answer NOT_SERVING.
func (s *Service) Drain() {
	if s.health != nil {
		s.health.Shutdown()
	}
}

// RegisterGRPC mounts the rate limit service and the standard gRPC health
// service on g.
func (s *Service) RegisterGRPC(g *grpc.Server) {
	s.svc.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	s.health = hs
	s.setHealth()
}

// setHealth sets the gRPC health of "ratelimit", envoyproxy/ratelimit's
// name for its service: SERVING, or NOT_SERVING while no domain is loaded
// when Config.HealthyWithConfig asks for one.
func (s *Service) setHealth() {
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if !s.rlsConfigured() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("ratelimit", st)
}
