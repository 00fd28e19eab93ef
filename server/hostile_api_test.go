package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/jwttest"
)

// TestAPIJWKSUnreachable: with a jwks_url that cannot be fetched, the
// decision API keeps answering, and a token (however it is signed) is a
// missing key part: on_missing: refuse, 400, never an admission.
func TestAPIJWKSUnreachable(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(idp.Close)
	api, _ := startAdmin(t, `
jwt: {jwks_url: "`+idp.URL+`", issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    limits:
      - {name: per-user, key: jwt:sub, on_missing: refuse, algorithm: fixed_window, rate: 3/h}
`)
	tok := jwttest.NewKey(t, "k1").Token(t, "alice", "pro")
	body := fmt.Sprintf(`{"request": {"path": "/x", "ip": "203.0.113.7", "headers": {"Authorization": "Bearer %s"}}}`, tok)
	for i := range 3 {
		if code, resp := call(t, "POST", api+"/v1/check", "s3cret", body); code != http.StatusBadRequest {
			t.Fatalf("check %d: %d %s, want 400", i, code, resp)
		}
	}
}

// TestAPIBanNotEvaded: a key the decision API banned stays banned however
// the caller spells the address (IPv4-mapped IPv6, hexadecimal groups);
// one that is not an address is a 400.
func TestAPIBanNotEvaded(t *testing.T) {
	api, _ := startAdmin(t, `
rules:
  - name: login
    limits:
      - {name: per-ip, key: ip, algorithm: fixed_window, rate: 1/h, ban: 2h}
`)
	check := func(ip string) (code int, allowed bool, retryMs int64) {
		t.Helper()
		code, resp := call(t, "POST", api+"/v1/check", "s3cret", fmt.Sprintf(`{"request": {"path": "/", "ip": %q}}`, ip))
		var a struct {
			Allowed      bool
			RetryAfterMs int64 `json:"retry_after_ms"`
		}
		json.Unmarshal([]byte(resp), &a)
		return code, a.Allowed, a.RetryAfterMs
	}
	if code, ok, _ := check("192.0.2.1"); code != 200 || !ok {
		t.Fatalf("the first check: %d, allowed %v", code, ok)
	}
	// The window has at most an hour left: a Retry-After beyond it is
	// the ban's.
	for _, ip := range []string{"192.0.2.1", "::ffff:192.0.2.1", "::FFFF:c000:201"} {
		if code, ok, ms := check(ip); code != 200 || ok || ms <= 3600_000 {
			t.Errorf("%s: %d, allowed %v, retry after %dms; want refused by the 2h ban", ip, code, ok, ms)
		}
	}
	for _, ip := range []string{"192.0.2.01", " 192.0.2.1", "192.0.2.1/32"} {
		if code, ok, _ := check(ip); code != http.StatusBadRequest || ok {
			t.Errorf("%q: %d, allowed %v; want 400", ip, code, ok)
		}
	}
}

// TestAPIExpressionsFail: the decision API decides an expression that
// fails as the gateway does: a failing match applies its rule (counted), a
// failing key part is missing (on_missing: refuse, 400), a failing cost is
// a 400, an expression past the cost limit applies its rule.
func TestAPIExpressionsFail(t *testing.T) {
	api, _ := startAdmin(t, `
rules:
  - name: v2
    match: {path: /v2only/, expr: 'request.headers["x-api-version"] == "2"'}
    limits:
      - {name: v2-ip, key: ip, algorithm: fixed_window, rate: 2/h}
  - name: tenant
    match: {path: /tenant/}
    limits:
      - {name: per-tenant, key: "expr:'request.headers[\"x-tenant\"].lowerAscii()'", on_missing: refuse, algorithm: fixed_window, rate: 2/h}
  - name: weighted
    match: {path: /batch/}
    limits:
      - {name: batch, key: global, cost: "expr:'int(request.headers[\"x-units\"])'", algorithm: fixed_window, rate: 6/h}
  - name: slow
    match: {path: /slow/, expr: '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(a, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(b, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(c, a + b + c > 0)))'}
    limits:
      - {name: slow-ip, key: ip, algorithm: fixed_window, rate: 1/h}
`)
	// send checks n requests; each must be answered with status; it
	// returns how many were allowed.
	send := func(n int, path string, headers map[string]string, status int) (allowed int) {
		t.Helper()
		hs, _ := json.Marshal(headers)
		for range n {
			code, resp := call(t, "POST", api+"/v1/check", "s3cret", fmt.Sprintf(`{"request": {"path": %q, "ip": "203.0.113.7", "headers": %s}}`, path, hs))
			var a struct{ Allowed bool }
			if json.Unmarshal([]byte(resp), &a); code != status {
				t.Fatalf("%s %v: %d %s, want %d", path, headers, code, resp, status)
			}
			if a.Allowed {
				allowed++
			}
		}
		return allowed
	}
	for _, c := range []struct {
		what    string
		path    string
		headers map[string]string
		n, ok   int
		status  int
	}{
		{"version 2", "/v2only/x", map[string]string{"X-Api-Version": "2"}, 3, 2, 200},
		{"no version: counted by the exhausted rule", "/v2only/x", nil, 2, 0, 200},
		{"version 1", "/v2only/x", map[string]string{"X-Api-Version": "1"}, 2, 2, 200},
		{"no tenant: a missing key part", "/tenant/x", nil, 2, 0, 400},
		{"ACME and acme: one tenant", "/tenant/x", map[string]string{"X-Tenant": "ACME"}, 1, 1, 200},
		{"acme", "/tenant/x", map[string]string{"X-Tenant": "acme"}, 2, 1, 200},
		{"no units: a failing cost", "/batch/x", nil, 2, 0, 400},
		{"units not a number", "/batch/x", map[string]string{"X-Units": "many"}, 1, 0, 400},
		{"units above the capacity", "/batch/x", map[string]string{"X-Units": "7"}, 1, 0, 400},
		{"negative units", "/batch/x", map[string]string{"X-Units": "-1"}, 1, 0, 400},
		{"4 units of 6", "/batch/x", map[string]string{"X-Units": "4"}, 2, 1, 200},
		{"past the cost limit: the rule applies", "/slow/x", nil, 3, 1, 200},
	} {
		if got := send(c.n, c.path, c.headers, c.status); got != c.ok {
			t.Errorf("%s: %d of %d allowed, want %d", c.what, got, c.n, c.ok)
		}
	}
}
