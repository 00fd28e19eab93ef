package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/api"
	"github.com/sluicehq/sluice/server/keyview"
)

// TestJWTClaimsInTheDecisionAPI: /v1/check verifies the bearer token in
// request.headers.Authorization, as the gateway does with the request's
// own header: a free user gets 3 of 5, a pro user 12 of 12, and a token
// that does not verify is a missing key part (on_missing: refuse, 400),
// whatever it claims.
func TestJWTClaimsInTheDecisionAPI(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	dir := t.TempDir()
	jwttest.WriteJWKS(t, filepath.Join(dir, "jwks.json"), good)
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(`
jwt: {jwks_file: jwks.json, issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    match: {path: /api/}
    limits:
      - name: per-user
        key: jwt:sub
        on_missing: refuse
        algorithm: fixed_window
        rate: 3/h
        overrides:
          - {claim: plan, equals: pro, scale: 10}
`), 0o600)
	p, err := policy.Load(file, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	names := func(string, string) ([]string, []string, bool) { return nil, nil, false }
	ap, err := api.New(api.Config{Limiter: sluice.New(mem), Policy: func() *policy.Policy { return p },
		Keys: keyview.Shower{Names: names}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(n int, headers map[string]string) (allowed int, statuses []int) {
		hs, _ := json.Marshal(headers)
		body := fmt.Sprintf(`{"request": {"path": "/api/x", "ip": "203.0.113.7", "headers": %s}}`, hs)
		for range n {
			w := httptest.NewRecorder()
			ap.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
			var resp struct{ Allowed bool }
			json.Unmarshal(w.Body.Bytes(), &resp)
			if w.Code == http.StatusOK && resp.Allowed {
				allowed++
			}
			statuses = append(statuses, w.Code)
		}
		return allowed, statuses
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	if n, st := check(5, bearer(good.Token(t, "free-user", "free"))); n != 3 {
		t.Errorf("free user: %d of 5 (%v)", n, st)
	}
	if n, st := check(12, bearer(good.Token(t, "pro-user", "pro"))); n != 12 {
		t.Errorf("pro user: %d of 12 (%v)", n, st)
	}
	now := time.Now()
	pro := jwttest.Claims(now, map[string]any{"sub": "mallory", "plan": "pro"})
	expired := jwttest.Claims(now, map[string]any{"sub": "mallory", "plan": "pro", "exp": now.Add(-time.Hour).Unix()})
	wrongAud := jwttest.Claims(now, map[string]any{"sub": "mallory", "plan": "pro", "aud": "web"})
	for name, h := range map[string]map[string]string{
		"forged":          bearer(jwttest.NewKey(t, "k1").Sign(t, pro)),
		"expired":         bearer(good.Sign(t, expired)),
		"alg none":        bearer(jwttest.None("k1", pro)),
		"HS256 confused":  bearer(jwttest.HS256("k1", good.PublicJSON(), pro)),
		"wrong audience":  bearer(good.Sign(t, wrongAud)),
		"unknown kid":     bearer(jwttest.NewKey(t, "k2").Sign(t, pro)),
		"no token":        {},
		"lower-case name": {"authorization": "Bearer " + jwttest.None("k1", pro)},
	} {
		if n, st := check(5, h); n != 0 || st[0] != http.StatusBadRequest {
			t.Errorf("%s: %d of 5 (%v), want 0 and 400s", name, n, st)
		}
	}
}
