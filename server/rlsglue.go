package server

import (
	"context"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/rls"
)

// rlsService is the Envoy rate limit service as the server drives it.
type rlsService interface {
	reload() error
	domains() []string
	limits() []knownLimit
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
	svc := rls.New(s.limiter, cfg, rls.Options{
		Logger:          s.log,
		ResponseHeaders: s.cfg.Envoy.responseHeaders(),
		Observe: func(domain string, o rls.Outcome) {
			var outcome decide.Outcome
			switch o.Result {
			case rls.ResultOK:
				outcome = decide.Admitted
				if o.Shadow {
					outcome = decide.ShadowAdmitted
				}
			case rls.ResultOverLimit:
				outcome = decide.Refused
			case rls.ResultShadowOverLimit:
				outcome = decide.ShadowRefused
			default:
				return // no limit, unlimited, replaced, or not charged because another refused
			}
			limit := domain + "/" + o.Rule
			// What the status page shows of the key: the value of the
			// descriptor's last entry, which the service reports only
			// for detailed_metric limits.
			key := string(decide.AppendKey(nil, "", "rls", o.Rule))
			if o.Value != "" {
				key = string(decide.AppendKeyPart([]byte(key), o.Value))
			}
			s.observe("rls", decide.Observation{Limit: limit, Key: key, Outcome: outcome, Decision: sluice.Decision{Degraded: o.Degraded}})
		},
	})
	return &envoyRLS{svc: svc, paths: paths, opts: opts, s: s}, nil
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
func (e *envoyRLS) limits() []knownLimit {
	var out []knownLimit
	for _, l := range e.svc.Config().Limits() {
		out = append(out, knownLimit{name: l.Domain + "/" + l.Path, shadow: l.Shadow})
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
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING) // envoyproxy/ratelimit's name
	healthpb.RegisterHealthServer(g, hs)
	s.health = hs
}
