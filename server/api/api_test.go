package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/api"
	"github.com/sluicehq/sluice/server/internal/reloadtest"
	"github.com/sluicehq/sluice/server/keyview"
)

// byIP and byUser have a limit of the same rule and name, keyed by the
// client's address in one and by a header in the other.
const byIP = `
rules:
  - name: all
    match:
      path: /
    limits:
      - name: per-client
        key: ip
        algorithm: fixed_window
        rate: 100/m
`

const byUser = `
rules:
  - name: all
    match:
      path: /
    limits:
      - name: per-client
        key: header:X-User
        algorithm: fixed_window
        rate: 100/m
`

// TestOnePolicyPerRequest: a reload while a check is being decided does
// not change the policy the rest of the request is answered under. The
// request is planned under a policy that keys the limit by ip; the reload
// to one that keys the same limit by a header lands during the check; the
// answer must still name the parts of the key as the policy that planned
// it does (its values are an address, not a user).
func TestOnePolicyPerRequest(t *testing.T) {
	var cur atomic.Pointer[policy.Policy]
	cur.Store(reloadtest.Parse(t, "by-ip", byIP))
	byHeader := reloadtest.Parse(t, "by-user", byUser)
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := &reloadtest.HookStore{Store: mem, Hook: func() { cur.Store(byHeader) }}
	names := func(rule, limit string) ([]string, []string, bool) { // as sluice serve's, under the policy in force
		for _, r := range cur.Load().Rules {
			for _, l := range r.Limits {
				if r.Name == rule && l.Name == limit {
					key, onMissing := l.KeyNames()
					return key, onMissing, true
				}
			}
		}
		return nil, nil, false
	}
	ap, err := api.New(api.Config{Limiter: sluice.New(store), Policy: cur.Load,
		Keys: keyview.Shower{Show: true, Names: names}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"request": {"path": "/", "ip": "203.0.113.7", "headers": {"X-User": "alice"}}}`
	w := httptest.NewRecorder()
	ap.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if cur.Load() != byHeader {
		t.Fatal("the reload did not happen during the request")
	}
	var resp struct {
		Decisions []struct {
			KeyParts []string `json:"key_parts"`
			Values   []string `json:"values"`
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Decisions) != 1 {
		t.Fatalf("%d decisions, want 1: %s", len(resp.Decisions), w.Body)
	}
	d := resp.Decisions[0]
	if !slices.Equal(d.KeyParts, []string{"ip"}) || !slices.Equal(d.Values, []string{"203.0.113.7"}) {
		t.Errorf("key_parts %q, values %q: want [ip] [203.0.113.7], the parts of the policy that planned the request", d.KeyParts, d.Values)
	}
}
