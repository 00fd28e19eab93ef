package server

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

//go:embed status.html
var statusPage []byte

// adminHandler serves the admin listener: /metrics, /healthz, /readyz,
// /status (a self-contained page), /status.json, one key's state
// (/admin/keys, /admin/keys/reset: keys.go) and, with Config.Pprof,
// /debug/pprof/.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: starting or shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		misconfigured, err := s.backend.readiness(ctx)
		switch {
		case err == nil:
			w.Write([]byte("ok\n"))
		case misconfigured:
			// Never answered since start, or refuses sluice's
			// credentials: a wrong address or password, which no
			// failure mode should hide.
			http.Error(w, "not ready: the store does not answer and never has, or refuses the credentials (check store.redis): "+err.Error(), http.StatusServiceUnavailable)
		case r.URL.Query().Get("degraded") == "ok":
			// ?degraded=ok: ready during an outage of a store that
			// answered before, because the failure modes (fallback,
			// open) decide meanwhile; a probe that takes every instance
			// out of its Service during a Redis outage would turn it
			// into an outage of the service.
			w.Write([]byte("ok (degraded: the store does not answer: " + err.Error() + ")\n"))
		default:
			http.Error(w, "not ready: the store does not answer: "+err.Error(), http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
		w.Write(statusPage)
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(s.status())
	})
	mux.HandleFunc("GET /admin/keys", s.inspectKey)
	mux.HandleFunc("POST /admin/keys/reset", s.resetKey)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status", http.StatusFound)
	})
	if s.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	}
	return mux
}

type statusRule struct {
	Name   string        `json:"name"`
	Match  string        `json:"match"`
	Action string        `json:"action"`
	Limits []statusLimit `json:"limits"`
}

type statusLimit struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
}

type statusDoc struct {
	Version    string            `json:"version"`
	Uptime     string            `json:"uptime"`
	Now        time.Time         `json:"now"`
	Ready      bool              `json:"ready"`
	Store      string            `json:"store"`
	Keys       *int              `json:"keys,omitempty"`
	Listeners  map[string]string `json:"listeners"`
	Upstream   string            `json:"upstream"`
	Policy     string            `json:"policy"`
	PolicyErr  string            `json:"policy_error,omitempty"`
	RLS        []string          `json:"rls,omitempty"`
	RLSErr     string            `json:"rls_error,omitempty"`
	RLSDomains []string          `json:"rls_domains,omitempty"`
	LoadedAt   time.Time         `json:"loaded_at"`
	Rules      []statusRule      `json:"rules"`
	Counts     []limitStats      `json:"counts"`
	HeavyKeys  []heavyKey        `json:"heavy_keys"`
	Goroutines int               `json:"goroutines"`
	HeapBytes  uint64            `json:"heap_bytes"`
}

func (s *Server) status() statusDoc {
	p := s.currentPolicy()
	ld := s.loaded.Load()
	doc := statusDoc{
		Version: s.version, Uptime: time.Since(s.started).Round(time.Second).String(), Now: time.Now(),
		Ready: s.ready.Load(), Store: s.backend.desc, Listeners: map[string]string{},
		Upstream: s.cfg.Upstream, Policy: p.File, PolicyErr: ld.policyErr, RLSErr: ld.rlsErr, RLS: s.cfg.RLS,
		LoadedAt: ld.at, Goroutines: runtime.NumGoroutine(),
	}
	if doc.Upstream == "" && s.cfg.Gateway != "" {
		doc.Upstream = "built-in demo"
	}
	if s.backend.keys != nil {
		n := s.backend.keys()
		doc.Keys = &n
	}
	for name, ln := range s.listeners {
		doc.Listeners[name] = ln.Addr().String()
	}
	if s.rls != nil {
		doc.RLSDomains = s.rls.domains()
	}
	for _, r := range p.Rules {
		sr := statusRule{Name: r.Name, Match: r.Match(), Action: actionString(r)}
		for _, l := range r.Limits {
			sr.Limits = append(sr.Limits, statusLimit{Name: l.Name, Key: l.Key(), Algorithm: l.Limit.String()})
		}
		doc.Rules = append(doc.Rules, sr)
	}
	doc.Counts, doc.HeavyKeys = s.stats.snapshot()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	doc.HeapBytes = ms.HeapAlloc
	return doc
}

// actionString describes what a rule does on refusal.
func actionString(r *policy.Rule) string {
	a := r.Action
	var out string
	switch {
	case r.Shadow:
		out = "shadow (count, admit)"
	case a.Wait:
		out = "delay up to " + sluice.FormatDuration(a.MaxDelay) + ", then reject"
	default:
		out = "reject"
	}
	if a.Status != 0 {
		out += fmt.Sprintf(" with %d", a.Status)
	}
	switch r.OnError {
	case sluice.FailOpen:
		out += "; on store error: admit"
	case sluice.FailClosed:
		out += "; on store error: refuse (503)"
	case sluice.FailFallback:
		out += "; on store error: local fallback"
	}
	return out
}
