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
