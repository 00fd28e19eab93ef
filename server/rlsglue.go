package server

import (
	"context"
	"sync"
	"sync/atomic"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/metrics"
	"github.com/sluicehq/sluice/server/rls"
)

// rlsService is the Envoy rate limit service as the server drives it.
type rlsService interface {
	reload() error
	domains() []string
	limits() []metrics.KnownLimit
	register(grpc.ServiceRegistrar)
	shouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error)
	close()
}

// envoyRLS mounts package rls: the descriptor configs at paths, reloaded
// on demand, decisions counted under source "rls" with the limit label
// "domain/descriptor path" (bounded by the configs, never by clients).
type envoyRLS struct {
	svc   *rls.Service
	paths []string
	opts  rls.LoadOptions
	s     *Server
}

func newRLS(s *Server, paths []string) (rlsService, error) {
	var cfg *rls.Config
	opts := rls.LoadOptions{MergeDomains: s.cfg.Envoy.MergeDomains}
	if len(paths) > 0 {
		var err error
		if cfg, err = load(s, opts, paths); err != nil {
			return nil, err
		}
		s.log.Info("rls: loaded", "domains", cfg.Domains(), "config", cfg.String())
	}
	counting, err := s.cfg.Envoy.counting()
	if err != nil {
		return nil, err
	}
	svc, err := rls.New(s.limiter, cfg, rls.Options{
		Logger:                     s.log,
		KeyText:                    s.keys.Key,
		ResponseHeaders:            s.cfg.Envoy.responseHeaders(),
		Counting:                   counting,
		StopIncrementWhenOverLimit: s.cfg.Envoy.StopIncrementWhenOverLimit,
		ShadowMode:                 s.cfg.Envoy.ShadowMode,
		QuotaMode:                  s.cfg.Envoy.QuotaMode,
		Bounds:                     s.cfg.Envoy.bounds(),
		Observe:                    newRLSObserver(s).observe,
	})
	if err != nil {
		return nil, err
	}
	return &envoyRLS{svc: svc, paths: paths, opts: opts, s: s}, nil
}

// rlsObserver counts RLS decisions under source "rls" with the limit label
// "domain/descriptor path" (bounded by the configs, never by clients). It
// keeps each limit's label and counters, so that a decision costs no
// string building and no label lookup.
type rlsObserver struct {
	s      *Server
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

func newRLSObserver(s *Server) *rlsObserver {
	hits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rls_hits_total",
		Help: "Hits of RLS descriptors counted as envoyproxy/ratelimit counts them (--rls-counting peer), by limit and range, as its within_limit, near_limit (past 80% of the limit) and over_limit statistics.",
	}, []string{"limit", "range"})
	s.metrics.Reg.MustRegister(hits)
	return &rlsObserver{s: s, hits: hits}
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
	r.s.stats.Add("rls", ob)
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
			c.c[i][d] = r.s.metrics.Decisions.WithLabelValues("rls", c.limit, o.String(), degraded)
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
func load(s *Server, opts rls.LoadOptions, paths []string) (*rls.Config, error) {
	cfg, err := rls.LoadConfigWith(opts, paths...)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		s.log.Warn("rls: config warning", "warning", w.Error())
	}
	return cfg, nil
}

func (e *envoyRLS) reload() error {
	if len(e.paths) == 0 {
		return nil
	}
	cfg, err := load(e.s, e.opts, e.paths)
	if err != nil {
		return err // the old config stays
	}
	e.svc.Swap(cfg)
	return nil
}

// limits returns the names (domain/descriptor path, as the metrics label
// them) of the configured limits.
func (e *envoyRLS) limits() []metrics.KnownLimit {
	var out []metrics.KnownLimit
	for _, l := range e.svc.Config().Limits() {
		out = append(out, metrics.KnownLimit{Name: l.Domain + "/" + l.Path, Shadow: l.Shadow})
	}
	return out
}

func (e *envoyRLS) domains() []string {
	if c := e.svc.Config(); c != nil {
		return c.Domains()
	}
	return nil
}

func (e *envoyRLS) register(r grpc.ServiceRegistrar) { e.svc.Register(r) }
func (e *envoyRLS) shouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return e.svc.ShouldRateLimit(ctx, req)
}
func (e *envoyRLS) close() { e.svc.Close() }

// registerGRPC mounts the rate limit service and the standard gRPC health
// service on g.
func (s *Server) registerGRPC(g *grpc.Server) {
	s.rls.register(g)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	s.health = hs
	s.rlsHealth()
}

// rlsHealth sets the gRPC health of "ratelimit", envoyproxy/ratelimit's
// name for its service: SERVING, or NOT_SERVING while no domain is loaded
// when Envoy.HealthyWithConfig asks for one.
func (s *Server) rlsHealth() {
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if !s.rlsConfigured() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("ratelimit", st)
}
