package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server/bans"
	"github.com/sluicehq/sluice/server/keyview"
	"github.com/sluicehq/sluice/shed"
)

//go:embed status.html
var statusPage []byte

// Config is what the admin listener shows and acts on. Every func is
// required but RLSDomains.
type Config struct {
	Version  string
	Started  time.Time
	Upstream string   // what the gateway fronts, as the status page says it
	RLS      []string // the RLS config paths
	Pprof    bool     // serve /debug/pprof/
	Registry *prometheus.Registry
	Stats    *Stats
	Keys     keyview.Shower
	Logger   *slog.Logger
	Store    Store
	// Overrides serves /admin/overrides (nil: not served).
	Overrides http.Handler
	// Bans lists the bans running (GET /admin/bans; nil: not served).
	Bans bans.Index

	Policy     func() *policy.Policy
	Ready      func() bool // false while starting and shutting down
	Loaded     func() *Loaded
	Listeners  func() map[string]string // bound addresses, by listener
	RLSDomains func() []string          // nil without the RLS
	Shed       func() map[string]shed.Stats
}

// Store is the store as the admin listener sees it.
type Store struct {
	Desc  string       // names the store ("redis 127.0.0.1:6379")
	Store sluice.Store // peeked at and reset by /admin/keys
	// Keys counts the keys a memory store holds (nil for Redis).
	Keys func() int
	// Probe reports whether the store answers; misconfigured is set when
	// it never has, or refuses the credentials.
	Probe    func(ctx context.Context) (misconfigured bool, err error)
	Failover *failover.Store              // nil without a breaker
	Leases   func() redisstore.LeaseStats // nil without quota leases
}

// Loaded is the last load of each config, for the status page.
type Loaded struct {
	PolicyErr, RLSErr string
	At                time.Time
}

// admin serves the admin listener.
type admin struct{ cfg Config }

// Handler serves the admin listener: /metrics, /healthz, /readyz,
// /status (a self-contained page), /status.json, one key's state
// (/admin/keys, /admin/keys/reset: keys.go), the runtime overrides
// (/admin/overrides: Config.Overrides), the bans running (/admin/bans:
// bans.go) and, with Config.Pprof,
// /debug/pprof/.
func Handler(cfg Config) http.Handler {
	s := &admin{cfg}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, detail := s.readiness(r.Context(), r.URL.Query().Get("degraded") == "ok")
		if !ok {
			http.Error(w, detail, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(detail + "\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
		w.Write(statusPage)
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(s.status(r.Context()))
	})
	mux.HandleFunc("GET /admin/keys", s.inspectKey)
	mux.HandleFunc("POST /admin/keys/reset", s.resetKey)
	if s.cfg.Bans != nil {
		mux.HandleFunc("GET /admin/bans", s.listBans)
	}
	if s.cfg.Overrides != nil {
		mux.Handle("/admin/overrides", s.cfg.Overrides)
		mux.Handle("/admin/overrides/", s.cfg.Overrides)
	}
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

// readiness is the answer of /readyz, and of the status page: whether the
// server is ready, and why not. degradedOK (/readyz?degraded=ok) counts a
// server ready during an outage of a store that answered before, because
// the failure modes (fallback, open) decide meanwhile; a probe that takes
// every instance out of its Service during a Redis outage would turn it
// into an outage of the service.
func (s *admin) readiness(ctx context.Context, degradedOK bool) (ok bool, detail string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	misconfigured, err := s.cfg.Store.Probe(ctx)
	return s.readyAnswer(misconfigured, err, degradedOK)
}

// readyAnswer is readiness given the store's answer to a probe.
func (s *admin) readyAnswer(misconfigured bool, err error, degradedOK bool) (ok bool, detail string) {
	switch {
	case !s.cfg.Ready():
		return false, "not ready: starting or shutting down"
	case err == nil:
		return true, "ok"
	case misconfigured:
		// Never answered since start, or refuses sluice's credentials: a
		// wrong address or password, which no failure mode should hide.
		return false, "not ready: the store does not answer and never has, or refuses the credentials (check store.redis): " + err.Error()
	case degradedOK:
		return true, "ok (degraded: the store does not answer: " + err.Error() + ")"
	}
	return false, "not ready: the store does not answer: " + err.Error()
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

// statusStore is the store's health as the status page shows it.
type statusStore struct {
	// Desc names the store ("redis 127.0.0.1:6379").
	Desc string `json:"desc"`
	// Error is why the store does not answer ("" when it does).
	Error string `json:"error,omitempty"`
	// Breaker is the state of the breaker in front of Redis ("closed",
	// "open", "half-open"); empty for the memory store, which has none.
	Breaker string `json:"breaker,omitempty"`
	// Failures, ShortCircuited and the Degraded counts come from the
	// breaker's store (see failover.Stats), since start.
	Calls          int64 `json:"calls"`
	Failures       int64 `json:"failures"`
	ShortCircuited int64 `json:"short_circuited"`
	Opens          int64 `json:"opens"`
	DegradedOpen   int64 `json:"degraded_open"`
	DegradedClosed int64 `json:"degraded_closed"`
	DegradedLocal  int64 `json:"degraded_fallback"`
	// Leases are the Redis store's quota leases; nil without them.
	Leases *statusLeases `json:"leases,omitempty"`
}

// statusLeases is what the status page shows of quota leases (see
// redisstore.LeaseStats): what they hold now and the bound on it, and
// their counts since start.
type statusLeases struct {
	Held     int64 `json:"held"`
	Bound    int64 `json:"bound"`
	Keys     int   `json:"keys"`
	Leases   int64 `json:"leases"`
	Units    int64 `json:"units"`
	Calls    int64 `json:"calls"`
	Refused  int64 `json:"refused"`
	Failed   int64 `json:"failed"`
	Local    int64 `json:"local"`
	Returned int64 `json:"returned"`
	Expired  int64 `json:"expired"`
	Lost     int64 `json:"lost"`
}

type statusDoc struct {
	Version    string            `json:"version"`
	Uptime     string            `json:"uptime"`
	Now        time.Time         `json:"now"`
	Ready      bool              `json:"ready"`
	ReadyText  string            `json:"ready_detail"`
	Store      string            `json:"store"`
	StoreState statusStore       `json:"store_state"`
	ShowKeys   bool              `json:"show_keys"`
	History    historyDoc        `json:"history"`
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
	// Shed is the load shedding of each listener that has it.
	Shed map[string]shed.Stats `json:"shed,omitempty"`
}

func (s *admin) status(ctx context.Context) statusDoc {
	p := s.cfg.Policy()
	ld := s.cfg.Loaded()
	doc := statusDoc{
		Version: s.cfg.Version, Uptime: time.Since(s.cfg.Started).Round(time.Second).String(), Now: time.Now(),
		Store: s.cfg.Store.Desc, Listeners: s.cfg.Listeners(), ShowKeys: s.cfg.Keys.Show,
		Upstream: s.cfg.Upstream, Policy: p.File, PolicyErr: ld.PolicyErr, RLSErr: ld.RLSErr, RLS: s.cfg.RLS,
		LoadedAt: ld.At, Goroutines: runtime.NumGoroutine(),
	}
	if s.cfg.Store.Keys != nil {
		n := s.cfg.Store.Keys()
		doc.Keys = &n
	}
	if s.cfg.RLSDomains != nil {
		doc.RLSDomains = s.cfg.RLSDomains()
	}
	for _, r := range p.Rules {
		sr := statusRule{Name: r.Name, Match: r.Match(), Action: actionString(r)}
		for _, l := range r.Limits {
			sr.Limits = append(sr.Limits, statusLimit{Name: l.Name, Key: l.Key(), Algorithm: l.Limit.String()})
		}
		doc.Rules = append(doc.Rules, sr)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	misconfigured, err := s.cfg.Store.Probe(pctx) // one probe for both
	cancel()
	doc.Ready, doc.ReadyText = s.readyAnswer(misconfigured, err, false)
	doc.StoreState = s.storeState(err)
	doc.Counts, doc.HeavyKeys = s.cfg.Stats.snapshot(s.cfg.Keys.Key)
	if doc.Counts == nil { // [] rather than null: the page reads them as lists
		doc.Counts = []limitStats{}
	}
	if doc.HeavyKeys == nil {
		doc.HeavyKeys = []heavyKey{}
	}
	doc.History = s.cfg.Stats.hist.doc()
	doc.Shed = s.cfg.Shed()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	doc.HeapBytes = ms.HeapAlloc
	return doc
}

// storeState reports the store's health: whether it answered a probe
// (probeErr), the breaker and the failover counts.
func (s *admin) storeState(probeErr error) statusStore {
	st := statusStore{Desc: s.cfg.Store.Desc}
	if probeErr != nil {
		st.Error = probeErr.Error()
	}
	if fs := s.cfg.Store.Failover; fs != nil {
		fst := fs.Stats()
		st.Breaker = fs.State().String()
		st.Calls, st.Failures, st.ShortCircuited, st.Opens = fst.Calls, fst.Failures, fst.ShortCircuited, fst.Opens
		st.DegradedOpen, st.DegradedClosed, st.DegradedLocal = fst.DegradedOpen, fst.DegradedClosed, fst.DegradedFallback
	}
	if s.cfg.Store.Leases != nil {
		l := s.cfg.Store.Leases()
		st.Leases = &statusLeases{Held: l.Held, Bound: l.Bound, Keys: l.Keys, Leases: l.Leases, Units: l.Units,
			Calls: l.Calls, Refused: l.Refused, Failed: l.Failed, Local: l.Local, Returned: l.Returned, Expired: l.Expired, Lost: l.Lost}
	}
	return st
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
