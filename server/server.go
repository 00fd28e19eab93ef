package server

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/admin"
	"github.com/sluicehq/sluice/server/api"
	"github.com/sluicehq/sluice/server/bans"
	"github.com/sluicehq/sluice/server/envoy"
	"github.com/sluicehq/sluice/server/gateway"
	"github.com/sluicehq/sluice/server/internal/reloading"
	"github.com/sluicehq/sluice/server/internal/snapshot"
	"github.com/sluicehq/sluice/server/keyview"
	"github.com/sluicehq/sluice/server/listen"
	"github.com/sluicehq/sluice/server/metrics"
	"github.com/sluicehq/sluice/server/overrides"
	"github.com/sluicehq/sluice/server/rls"
	"github.com/sluicehq/sluice/server/shedding"
	"github.com/sluicehq/sluice/server/watch"
	"github.com/sluicehq/sluice/shed"
)

//go:embed defaults/policy.yaml
var samplePolicy []byte

// SamplePolicy is the policy sluice serve applies when none is configured.
func SamplePolicy() []byte { return samplePolicy }

// Options are what a Server needs besides its Config.
type Options struct {
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Version is reported by /metrics and the status page.
	Version string
}

// Server is sluice serve: the gateway, the decision API, the Envoy rate
// limit service and the admin endpoints, over one store and one policy.
type Server struct {
	cfg     Config
	log     *slog.Logger
	version string
	started time.Time

	backend *backend
	limiter *sluice.Limiter
	api     *api.API
	metrics *metrics.Metrics
	stats   *admin.Stats
	keys    keyview.Shower // how the status page shows keys
	stopBg  chan struct{}  // stops the history recorder

	holder *policy.Holder // the policy file, if one is configured
	sample *policy.Policy // else the sample policy
	loaded atomic.Pointer[admin.Loaded]

	rls    *envoy.Service             // nil without a grpc listener
	tls    *listen.TLS                // nil without TLS
	tokens *reloading.Value[tokenSet] // nil without auth.tokens_file

	listeners map[string]net.Listener
	https     map[string]*http.Server // by listener name
	grpc      *grpc.Server
	ready     atomic.Bool
	wg        sync.WaitGroup
	watcher   atomic.Pointer[watch.Watcher] // nil without watching (Reload reads it from any goroutine)
	closeOnce sync.Once
	stopOnce  sync.Once // closes stopBg

	sheds *shedding.Set // the load shedding of each listener that has it

	overrides *overrides.Service // the runtime overrides
	bans      bans.Index         // the bans the policy's limits started
}

// New builds a Server from cfg: it validates cfg, opens the store and
// loads the policy and RLS configs. Nothing listens until Start.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s := newServer(cfg, opts)
	b, err := openStore(cfg.Store, s.metrics.BreakerChanged, s.log)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.backend = b
	for _, build := range []func(*Server) error{openGuards, buildAPI, buildOverrides, loadPolicy, buildEnvoy} {
		if err := build(s); err != nil {
			b.close()
			return nil, err
		}
	}
	s.loaded.Store(&admin.Loaded{At: time.Now()})
	s.knownLimits()
	return s, nil
}

// newServer is the Server of cfg before its store and parts: its logger,
// metrics, status page counts and load shedding.
func newServer(cfg Config, opts Options) *Server {
	s := &Server{cfg: cfg, log: opts.Logger, version: opts.Version, started: time.Now(),
		stats: admin.NewStats(historyStep, historyWindow), stopBg: make(chan struct{})}
	s.keys = keyview.Shower{Show: cfg.ShowKeys, Names: func(rule, limit string) ([]string, []string, bool) {
		return keyview.NamesIn(s.currentPolicy(), rule, limit)
	}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.version == "" {
		s.version = "dev"
	}
	s.metrics = metrics.New(s.version)
	s.sheds = shedding.NewSet(s.currentPolicy)
	s.metrics.Reg.MustRegister(metrics.ShedCollector(s.sheds.Stats))
	return s
}

// openGuards loads the listeners' TLS and the auth tokens, and warns of
// listeners anyone may use.
func openGuards(s *Server) error {
	var err error
	if s.tls, err = listen.NewTLS(s.cfg.TLS, s.log); err != nil {
		return err
	}
	if s.cfg.Auth.TokensFile != "" {
		if s.tokens, err = reloading.New("auth tokens", []string{s.cfg.Auth.TokensFile}, loadTokens(s.cfg.Auth.TokensFile), s.log); err != nil {
			return err
		}
	}
	warnOpen(&s.cfg, s.tokens != nil, s.log)
	return nil
}

// buildAPI makes the limiter over the instrumented store, and the
// decision API; it exports the store's failover and lease series.
func buildAPI(s *Server) error {
	b := s.backend
	s.limiter = sluice.New(s.metrics.Instrument(b.store))
	var err error
	s.api, err = api.New(api.Config{
		Limiter: s.limiter, Policy: s.currentPolicy, Keys: s.keys, MaxDelay: time.Duration(s.cfg.MaxDelay),
		SettleTTL: time.Duration(s.cfg.SettleTTL), SettleSecretFile: s.cfg.SettleSecretFile, Logger: s.log,
		Observe: func(o decide.Observation) { s.observe("api", o) },
		Settled: func(limit string, actual int64, found, capped bool, err error) {
			s.metrics.Settled("api", limit, actual, found, capped, err)
		},
	})
	if err != nil {
		return err
	}
	if b.failover != nil {
		s.metrics.WatchFailover(b.failover)
	}
	if b.leases != nil {
		s.metrics.Reg.MustRegister(metrics.NewLeaseCollector(b.leases))
	}
	return nil
}

// loadPolicy loads the policy file, or the sample policy without one.
func loadPolicy(s *Server) error {
	opts := policy.Options{MaxDelay: time.Duration(s.cfg.MaxDelay), Runtime: s.overrides, Bans: s.bans, Logger: s.log}
	if s.cfg.Policy == "" {
		p, err := policy.Parse("sample policy", samplePolicy, opts)
		if err != nil {
			return fmt.Errorf("the embedded sample policy: %w", err) // a build defect
		}
		s.sample = p
		return nil
	}
	s.metrics.KnownConfig("policy")
	h, err := policy.NewHolder(s.cfg.Policy, opts, s.log)
	s.metrics.Reloaded("policy", err)
	if err != nil {
		return err
	}
	s.holder = h
	return nil
}

// buildEnvoy makes the Envoy rate limit service when a listener serves
// it; without configs every descriptor is OK, as in envoyproxy/ratelimit.
func buildEnvoy(s *Server) error {
	if s.cfg.GRPC == "" && s.cfg.Envoy.HTTP == "" {
		return nil
	}
	svc, err := envoy.New(s.cfg.Envoy, s.cfg.RLS, envoy.Deps{
		Limiter: s.limiter, Logger: s.log, KeyText: s.keys.Key, Registry: s.metrics.Reg, Decisions: s.metrics.Decisions,
		Observe: func(o decide.Observation) { s.stats.Add("rls", o) }, Runtime: s.overrides,
	})
	if len(s.cfg.RLS) > 0 {
		s.metrics.KnownConfig("rls")
		s.metrics.Reloaded("rls", err)
	}
	if err != nil {
		return err
	}
	s.rls = svc
	return nil
}

// currentPolicy is the policy in force.
func (s *Server) currentPolicy() *policy.Policy {
	if s.holder != nil {
		return s.holder.Policy()
	}
	return s.sample
}

// observe counts one decision in the metrics and the status page.
func (s *Server) observe(source string, o decide.Observation) {
	s.metrics.Observe(source, o)
	s.stats.Add(source, o)
}

// Start listens on every configured address and serves in the background.
// It returns once all listeners are bound (or the first that fails).
func (s *Server) Start() error {
	s.listeners = map[string]net.Listener{}
	s.https = map[string]*http.Server{}
	warnFileLimit(&s.cfg, s.log)
	services, err := httpServices(s)
	if err != nil {
		return err
	}
	for _, sv := range services {
		if err := bindHTTP(s, sv); err != nil {
			s.closeListeners()
			return fmt.Errorf("%s: %w", sv.name, err)
		}
	}
	if s.cfg.GRPC != "" {
		if err := s.listenGRPC(); err != nil {
			s.closeListeners()
			return err
		}
	}
	for name, hs := range s.https {
		ln := s.listeners[name]
		s.wg.Go(func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("listener stopped", "listener", name, "err", err)
			}
		})
	}
	if s.grpc != nil {
		ln := s.listeners["grpc"]
		s.wg.Go(func() {
			if err := s.grpc.Serve(ln); err != nil {
				s.log.Error("listener stopped", "listener", "grpc", "err", err)
			}
		})
	}
	if s.cfg.WatchFiles() {
		s.watcher.Store(watchConfigs(s))
	}
	s.wg.Go(func() { s.stats.RecordEvery(historyStep, s.stopBg) })
	s.ready.Store(true)
	s.log.Info("sluice serving", s.servingAttrs()...)
	return nil
}

// httpService is an HTTP listener to bind: its name, address and handler.
type httpService struct {
	name, addr string
	handler    http.Handler
}

// httpServices are the HTTP listeners the config turns on.
func httpServices(s *Server) ([]httpService, error) {
	var services []httpService
	if s.cfg.Gateway != "" {
		h, err := s.gatewayHandler()
		if err != nil {
			return nil, err
		}
		services = append(services, httpService{"gateway", s.cfg.Gateway, h})
	}
	if s.cfg.API != "" {
		priority := func(r *http.Request) shed.Priority { return api.Priority(snapshot.Of(r), r) }
		h := snapshot.Serving(s.currentPolicy, s.sheds.Wrap("api", snapshot.Of, priority, s.api.Handler()))
		services = append(services, httpService{"api", s.cfg.API, h})
	}
	if s.cfg.Admin != "" {
		services = append(services, httpService{"admin", s.cfg.Admin, s.adminHandler()})
	}
	if s.cfg.Envoy.HTTP != "" {
		services = append(services, httpService{"envoy-http", s.cfg.Envoy.HTTP, s.rls.HTTPHandler(s.ready.Load)})
	}
	return services, nil
}

// bindHTTP binds the listener of sv (its cap, TLS or the 431 rewriter) and
// makes its http.Server (the header bound, auth).
func bindHTTP(s *Server, sv httpService) error {
	lim := s.cfg.Limits(sv.name)
	tc := s.tls.Config(sv.name, "h2", "http/1.1")
	ln, err := listen.Listen(sv.name, sv.addr, lim, tc == nil, s.metrics.RefusedCounter(sv.name, s.log))
	if err != nil {
		return err
	}
	tooLarge := s.metrics.TooLargeCounter(sv.name)
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	} else {
		ln = listen.NewTooLargeListener(ln, lim.MaxHeader, tooLarge)
	}
	s.listeners[sv.name] = ln
	s.https[sv.name] = listen.HTTPServer(authenticate(s.tokens, s.cfg.Auth.On(), s.metrics.Unauthorized, sv.name, sv.handler), lim, s.log, tooLarge)
	return nil
}

// watchConfigs watches the files the configs were read from (Holder.Files
// and the RLS configs), nil if it cannot.
func watchConfigs(s *Server) *watch.Watcher {
	files := func() []string { return append(s.holder.Files(), s.cfg.RLS...) } // holder is nil without a policy
	w, err := watch.Start(files, func() { s.Reload() }, s.log)                 // Reload logs and counts its own errors
	if err != nil {
		s.log.Warn("not watching config files; reload with SIGHUP", "err", err)
	}
	return w
}

// listenGRPC binds the grpc listener (its cap, TLS, the reset guard) and
// builds the gRPC server with the Envoy rate limit and health services.
func (s *Server) listenGRPC() error {
	lim := s.cfg.Limits("grpc")
	ln, err := listen.Listen("grpc", s.cfg.GRPC, lim, false, s.metrics.RefusedCounter("grpc", s.log))
	if err != nil {
		return fmt.Errorf("grpc: %w", err)
	}
	// TLS in the listener, not in grpc's credentials, so that the
	// reset guard reads the HTTP/2 frames in clear.
	if tc := s.tls.Config("grpc", "h2"); tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	ln = listen.ResetGuard(ln)
	s.listeners["grpc"] = ln
	s.grpc = grpc.NewServer(
		grpc.Creds(insecure.NewCredentials()),
		grpc.MaxRecvMsgSize(1<<20),
		grpc.MaxConcurrentStreams(1024),
		// A connection must finish its handshake and preface within
		// the read-header timeout, and one without calls for the idle
		// timeout is closed (with a GOAWAY).
		grpc.ConnectionTimeout(lim.ReadHeader),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: lim.Idle}),
		// Reused workers keep their grown stacks: a goroutine per call
		// spent a fifth of the RLS's CPU growing its stack.
		// (a worker must be free, or the call gets a new goroutine:
		// as many as the concurrent calls an Envoy fleet makes)
		grpc.NumStreamWorkers(uint32(max(256, 32*runtime.GOMAXPROCS(0)))),
		grpc.SharedWriteBuffer(true),
		rls.ServerCodec(),
	)
	s.rls.RegisterGRPC(s.grpc)
	return nil
}

// servingAttrs describe the server on its "sluice serving" line.
func (s *Server) servingAttrs() []any {
	attrs := []any{"version", s.version, "store", s.backend.desc, "policy", s.currentPolicy().File}
	for _, name := range []string{"gateway", "api", "grpc", "admin", "envoy-http"} {
		if ln := s.listeners[name]; ln != nil {
			attrs = append(attrs, name, ln.Addr().String())
		}
	}
	if s.tls != nil {
		var on []string
		for _, name := range []string{"gateway", "api", "grpc", "admin"} {
			if s.listeners[name] != nil && s.tls.Config(name) != nil {
				on = append(on, name)
			}
		}
		attrs = append(attrs, "tls", strings.Join(on, ","))
	}
	if s.cfg.Gateway != "" {
		up := s.cfg.Upstream
		if up == "" {
			up = "built-in demo"
		}
		attrs = append(attrs, "upstream", up)
	}
	return attrs
}

func (s *Server) closeListeners() {
	for _, ln := range s.listeners {
		ln.Close()
	}
}

// Addr returns the address a listener ("gateway", "api", "grpc", "admin")
// is bound to, or "" if it is off. Useful with port 0.
func (s *Server) Addr(name string) string {
	if ln := s.listeners[name]; ln != nil {
		return ln.Addr().String()
	}
	return ""
}

func (s *Server) gatewayHandler() (http.Handler, error) {
	s.metrics.WatchGateway()
	h, err := gateway.New(gateway.Config{
		Upstream:       s.cfg.Upstream,
		Limiter:        s.limiter,
		Policy:         s.currentPolicy,
		MaxDelay:       time.Duration(s.cfg.MaxDelay),
		DegradedHeader: s.cfg.DegradedHeader,
		ShowKeys:       s.cfg.ShowKeys,
		KeyText:        s.keys.Key,
		OnWaiting:      func(limit string, delta int) { s.metrics.Waiting.WithLabelValues(limit).Add(float64(delta)) },
		Logger:         s.log,
		Observe:        func(o decide.Observation) { s.observe("gateway", o) },
		SoftLimit:      func(limit string) { s.metrics.SoftLimit("gateway", limit) },
		Settled: func(st decide.Settled) {
			s.metrics.Settled("gateway", st.Check.Name, st.Actual, st.Found, st.Capped, st.Err)
		},
		Shed: func(priority shed.HTTPPriority, next http.Handler) http.Handler {
			return s.sheds.Wrap("gateway", snapshot.Of, priority, next)
		},
		UpstreamTime:   s.metrics.UpstreamTime.Observe,
		UpstreamFailed: s.metrics.UpstreamErrs.Inc,
	})
	if err != nil {
		return nil, err
	}
	return s.metrics.CountResponses(h), nil
}

// Reload loads the policy and RLS configs again. A config that fails to
// load keeps the old one serving; the error is logged, counted in
// sluice_config_reloads_total and returned. The file watcher, if on,
// follows the files the policy names now.
func (s *Server) Reload() error {
	defer s.watcher.Load().Follow() // after the load (after the watcher's own, which follows by itself, it changes nothing)
	var errs []error
	st := &admin.Loaded{At: time.Now()}
	if s.holder != nil {
		err := s.holder.Reload()
		s.metrics.Reloaded("policy", err)
		if err != nil {
			st.PolicyErr = err.Error()
			errs = append(errs, err)
		}
	}
	if s.rls != nil && len(s.cfg.RLS) > 0 {
		err := s.rls.Reload()
		s.metrics.Reloaded("rls", err)
		if err != nil {
			s.log.Error("RLS config did not load; the previous one stays", "err", err)
			st.RLSErr = err.Error()
			errs = append(errs, err)
		}
	}
	s.loaded.Store(st)
	s.knownLimits()
	return errors.Join(errs...)
}

// Shutdown stops accepting connections, reports not ready, and waits for
// in-flight requests to finish until ctx ends; then it cuts what is left
// (a normal end of a drain: logged, not an error) and closes the store.
// The admin listener closes last, so /readyz answers 503 during the drain.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	if s.rls != nil {
		s.rls.Drain() // gRPC health checks answer NOT_SERVING while draining
	}
	s.watcher.Load().Close() // nil without watching
	var cut atomic.Int32
	var wg sync.WaitGroup
	for name, hs := range s.https {
		if name == "admin" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cut.Add(shutdownHTTP(ctx, hs))
		}()
	}
	if s.grpc != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpc.Stop()
				cut.Add(1)
			}
		}()
	}
	wg.Wait()
	s.closeOnceBg()
	if hs := s.https["admin"]; hs != nil {
		shutdownHTTP(ctx, hs) // what the probes asked during the drain
	}
	if n := cut.Load(); n > 0 {
		s.log.Warn("in-flight requests cut at the shutdown deadline", "listeners", n, "timeout", time.Duration(s.cfg.ShutdownTimeout).String())
	}
	s.wg.Wait()
	var err error
	s.closeOnce.Do(func() {
		if s.rls != nil {
			s.rls.Close()
		}
		err = s.backend.close()
	})
	return err
}

// shutdownHTTP drains hs until ctx ends, then closes it. It returns 1 if
// requests were cut, else 0.
func shutdownHTTP(ctx context.Context, hs *http.Server) int32 {
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
		return 1
	}
	return 0
}

// Run starts the server and serves until ctx ends, then shuts down within
// the configured ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	s.log.Info("shutting down: draining in-flight requests", "timeout", time.Duration(s.cfg.ShutdownTimeout).String())
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.cfg.ShutdownTimeout))
	defer cancel()
	err := s.Shutdown(sctx)
	s.log.Info("stopped")
	return err
}
