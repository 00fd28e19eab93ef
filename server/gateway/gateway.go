// Package gateway is sluice serve's gateway: a reverse proxy that decides
// every request under the policy before it reaches the upstream.
//
// A request passes, in order: normalisation of its target (a target that
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
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/problem"
	"github.com/sluicehq/sluice/shed"
)

// Config is what the gateway needs. Limiter and Policy are required; a nil
// func is not called.
type Config struct {
	// Upstream is the URL of the service the gateway fronts; "" is the
	// built-in demo upstream.
	Upstream string
	// Limiter decides the planned checks.
	Limiter *sluice.Limiter
	// Policy returns the policy in force.
	Policy func() *policy.Policy
	// Source plans the checks of a request (a policy.Holder, or a fixed
	// policy).
	Source httplimit.Source

	// MaxDelay, DegradedHeader, ShowKeys, KeyText, OnWaiting: as in
	// httplimit.Config.
	MaxDelay       time.Duration
	DegradedHeader string
	ShowKeys       bool
	KeyText        func(key string) string
	OnWaiting      func(limit string, delta int)
	Logger         *slog.Logger

	// Observe counts a decision; Settled a settled cost.
	Observe func(decide.Observation)
	Settled func(decide.Settled)

	// Shed wraps next in the policy's load shedding, with the priorities
	// priority gives.
	Shed func(priority shed.HTTPPriority, next http.Handler) http.Handler

	// UpstreamTime observes the seconds of each call to the upstream;
	// UpstreamFailed counts those answered 502.
	UpstreamTime   func(seconds float64)
	UpstreamFailed func()
}

// New returns the gateway's handler.
func New(cfg Config) (http.Handler, error) {
	upstream, err := cfg.upstream()
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(cfg.Limiter, httplimit.Config{
		Source:         cfg.Source,
		MaxDelay:       cfg.MaxDelay,
		DegradedHeader: cfg.DegradedHeader,
		Logger:         cfg.Logger,
		ShowKeys:       cfg.ShowKeys,
		KeyText:        cfg.KeyText,
		Observe:        func(_ *http.Request, o decide.Observation) { cfg.Observe(o) },
		Settled:        func(_ *http.Request, st decide.Settled) { cfg.Settled(st) },
		OnWaiting:      cfg.OnWaiting,
	})
	if err != nil {
		return nil, err
	}
	guarded := cfg.Shed(func(r *http.Request) shed.Priority { return cfg.Policy().Priority(r) }, cfg.stripProtected(upstream))
	return cfg.normalizing(mw(guarded)), nil
}

// upstream is the handler requests that pass are proxied to.
func (cfg *Config) upstream() (http.Handler, error) {
	if cfg.Upstream == "" {
		return demoUpstream(), nil
	}
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	trusted := func(r *http.Request) bool { return cfg.Policy().ClientIP.PeerTrusted(r) }
	return newProxy(u, trusted, cfg.Logger, cfg.UpstreamTime, cfg.UpstreamFailed), nil
}

// stripProtected removes from requests that did not come through a trusted
// proxy the headers the policy honours only from such proxies (overrides
// that grant more): the upstream never sees a value sluice did not honour.
func (cfg *Config) stripProtected(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := cfg.Policy()
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
			problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error())
			return
		}
		next.ServeHTTP(w, n)
	})
}
