// Package gateway is sluice serve's gateway: a reverse proxy that decides
// every request under the policy before it reaches the upstream.
//
// A request is served under one policy from start to end: the gateway
// loads the policy in force once, when the request arrives (snapshot.Of), and
// every step reads that snapshot, so that a reload in the middle of a
// request cannot plan it under one policy and strip its headers under
// another. It passes, in order: normalisation of its target (a target that
// cannot be normalised is a 400), the rate limits (package httplimit over
// the policy's planned checks), the load shedding, the removal of the
// protected headers of untrusted peers, and the proxy to the upstream (or
// the built-in demo upstream).
package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/snapshot"
	"github.com/sluicehq/sluice/shed"
)

// Config is what the gateway needs. Limiter and Policy are required; the
// other funcs may be nil.
type Config struct {
	// Upstream is the URL of the service the gateway fronts; "" is the
	// built-in demo upstream.
	Upstream string
	// Limiter decides the planned checks.
	Limiter *sluice.Limiter
	// Policy returns the policy in force. The gateway calls it once per
	// request, and for the limit a cost settled after a reload is charged
	// under (the limit as it is now).
	Policy func() *policy.Policy

	// MaxDelay, DegradedHeader, ShowKeys, KeyText, OnWaiting: as in
	// httplimit.Config.
	MaxDelay       time.Duration
	DegradedHeader string
	ShowKeys       bool
	KeyText        func(key string) string
	OnWaiting      func(limit string, delta int)
	Logger         *slog.Logger

	// Observe counts a decision; Settled a settled cost; SoftLimit a key
	// that passed a limit's soft share.
	Observe   func(decide.Observation)
	Settled   func(decide.Settled)
	SoftLimit func(limit string)

	// Shed wraps next in the load shedding of the request's policy
	// (snapshot.Of), with the priorities priority gives.
	Shed func(priority shed.HTTPPriority, next http.Handler) http.Handler

	// UpstreamTime observes the seconds of each call to the upstream;
	// UpstreamFailed counts those answered 502.
	UpstreamTime   func(seconds float64)
	UpstreamFailed func()
}

// New returns the gateway's handler.
func New(cfg Config) (http.Handler, error) {
	cfg.defaults()
	upstream, err := cfg.upstream()
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(cfg.Limiter, httplimit.Config{
		Source:         snapshotSource{cfg.Policy},
		MaxDelay:       cfg.MaxDelay,
		DegradedHeader: cfg.DegradedHeader,
		Logger:         cfg.Logger,
		ShowKeys:       cfg.ShowKeys,
		KeyText:        cfg.KeyText,
		Observe:        func(_ *http.Request, o decide.Observation) { cfg.Observe(o) },
		Settled:        func(_ *http.Request, st decide.Settled) { cfg.Settled(st) },
		OnWaiting:      cfg.OnWaiting,
		SoftLimit:      cfg.SoftLimit,
	})
	if err != nil {
		return nil, err
	}
	guarded := cfg.Shed(func(r *http.Request) shed.Priority { return snapshot.Of(r).Priority(r) }, stripProtected(upstream))
	return snapshot.Serving(cfg.Policy, cfg.normalizing(mw(guarded))), nil
}

// defaults replaces the nil funcs with ones that do nothing.
func (cfg *Config) defaults() {
	if cfg.Observe == nil {
		cfg.Observe = func(decide.Observation) {}
	}
	if cfg.Settled == nil {
		cfg.Settled = func(decide.Settled) {}
	}
	if cfg.Shed == nil {
		cfg.Shed = func(_ shed.HTTPPriority, next http.Handler) http.Handler { return next }
	}
	if cfg.UpstreamTime == nil {
		cfg.UpstreamTime = func(float64) {}
	}
	if cfg.UpstreamFailed == nil {
		cfg.UpstreamFailed = func() {}
	}
}

// snapshotSource plans a request under its snapshot (snapshot.Of). A cost
// settled after the response is charged under the limit as it is now
// (decide.Relimiter), like policy.Holder's.
type snapshotSource struct{ current func() *policy.Policy }

func (s snapshotSource) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	return snapshot.Of(r).Plan(r, dst)
}

func (s snapshotSource) Relimit(c *decide.Check) (sluice.Limit, bool) {
	return s.current().Relimit(c)
}

var _ decide.Relimiter = snapshotSource{}

// upstream is the handler requests that pass are proxied to.
func (cfg *Config) upstream() (http.Handler, error) {
	if cfg.Upstream == "" {
		return demoUpstream(), nil
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	trusted := func(r *http.Request) bool { return snapshot.Of(r).ClientIP.PeerTrusted(r) }
	return newProxy(u, trusted, cfg.Logger, cfg.UpstreamTime, cfg.UpstreamFailed), nil
}

// stripProtected removes from requests that did not come through a trusted
// proxy the headers the request's policy honours only from such proxies
// (overrides that grant more): the upstream never sees a value sluice did
// not honour.
func stripProtected(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := snapshot.Of(r)
		if hs := p.ProtectedHeaders(); len(hs) > 0 && !p.ClientIP.PeerTrusted(r) {
			for k := range r.Header { // X_Internal_Caller too: CGI servers read it as X-Internal-Caller
				for _, h := range hs {
					if httplimit.SameHeader(k, h) {
						delete(r.Header, k)
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// normalizing brings the target of each request to the normal form the
// policy matches (policy.Normalize) before next sees it, so that the
// upstream receives the host and path the rules matched, not another
// spelling of them. A target that cannot be normalised without guessing
// how the upstream would read it is answered 400 with a problem document,
// and counted as invalid, like any client error of planning.
func (cfg *Config) normalizing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := policy.Normalize(r)
		if err != nil {
			cfg.Observe(decide.Observation{Limit: "plan", Outcome: decide.Invalid, Err: err})
			problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
			return
		}
		next.ServeHTTP(w, n)
	})
}
