package gateway_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/gateway"
	"github.com/sluicehq/sluice/server/internal/reloadtest"
	"github.com/sluicehq/sluice/shed"
)

// A vip override honoured only through trusted proxies (there are none):
// X-Plan is a protected header, removed before the upstream sees it.
const protectedPolicy = `
rules:
  - name: all
    match:
      path: /
    limits:
      - name: per-ip
        key: ip
        algorithm: fixed_window
        rate: 100/m
        overrides:
          - header: X-Plan
            equals: vip
            scale: 10
`

// The same rule without the override: nothing is protected.
const plainPolicy = `
rules:
  - name: all
    match:
      path: /
    limits:
      - name: per-ip
        key: ip
        algorithm: fixed_window
        rate: 100/m
`

// TestOnePolicyPerRequest: a reload while a request is being decided does
// not change the policy the rest of the request is served under. The
// request is planned under a policy that protects X-Plan (the peer is not
// a trusted proxy, so its vip claim is not honoured); the reload to a
// policy without the override lands during the check; the header must
// still be stripped before the upstream, as the policy that planned the
// request says.
func TestOnePolicyPerRequest(t *testing.T) {
	var seen atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("X-Plan"))
	}))
	defer up.Close()
	var cur atomic.Pointer[policy.Policy]
	cur.Store(reloadtest.Parse(t, "protected", protectedPolicy))
	plain := reloadtest.Parse(t, "plain", plainPolicy)
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := &reloadtest.HookStore{Store: mem, Hook: func() { cur.Store(plain) }}
	h, err := gateway.New(gateway.Config{
		Upstream:       up.URL,
		Limiter:        sluice.New(store),
		Policy:         cur.Load,
		Logger:         slog.New(slog.DiscardHandler),
		Observe:        func(decide.Observation) {},
		Settled:        func(decide.Settled) {},
		Shed:           func(_ shed.HTTPPriority, next http.Handler) http.Handler { return next },
		UpstreamTime:   func(float64) {},
		UpstreamFailed: func() {},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://example.com/", nil)
	r.Header.Set("X-Plan", "vip")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if cur.Load() != plain {
		t.Fatal("the reload did not happen during the request")
	}
	if v, _ := seen.Load().(string); v != "" {
		t.Errorf("the upstream saw X-Plan: %q, a value the policy that planned the request did not honour", v)
	}
}
