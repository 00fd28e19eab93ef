package server_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestAPIRuntimeOverrides: runtime overrides set through the admin API
// apply to the decision API, in policy mode and to explicit checks named
// after a policy limit (over the limit the check gives, for its key as the
// policy limit keys it). A key spelled otherwise (case, spaces,
// percent-encoding) is another key, unless the limit's key normalisation
// makes it the same (::ffff:192.0.2.1 is 192.0.2.1 for an ip key). A
// client of the decision API cannot set an override: the API has no such
// route and its checks take no such field.
func TestAPIRuntimeOverrides(t *testing.T) {
	api, admin := startAdmin(t, `
rules:
  - name: tenant
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
  - name: ip
    match: {path: /ip/}
    limits:
      - {name: per-ip, key: ip, algorithm: fixed_window, rate: 2/h}
`)
	for _, o := range []struct{ path, body string }{
		{"/admin/overrides/per-tenant/acme", `{"scale": 5}`},
		{"/admin/overrides/per-tenant/bulk", `{"unlimited": true}`},
		{"/admin/overrides/per-ip/" + url.PathEscape("::ffff:192.0.2.1"), `{"scale": 2}`},
	} {
		if code, body := call(t, "PUT", admin+o.path, "s3cret", o.body); code != 200 {
			t.Fatalf("PUT %s: %d %s", o.path, code, body)
		}
	}
	// allowed sends n checks and counts those allowed; each must be a
	// counted decision (200) or a 4xx, per want.
	allowed := func(n int, body string, status int) (ok int) {
		t.Helper()
		for range n {
			code, resp := call(t, "POST", api+"/v1/check", "s3cret", body)
			var a struct{ Allowed bool }
			if code != status || json.Unmarshal([]byte(resp), &a) != nil && code == 200 {
				t.Fatalf("%s: %d %s, want %d", body, code, resp, status)
			}
			if a.Allowed {
				ok++
			}
		}
		return ok
	}
	explicit := func(name, key string) string {
		b, _ := json.Marshal(map[string]any{"checks": []any{map[string]any{"name": name, "key": key, "limit": map[string]string{"algorithm": "fixed_window", "rate": "2/h"}}}})
		return string(b)
	}
	for _, c := range []struct {
		what, body string
		n, ok      int
	}{
		{"explicit acme, scale 5", explicit("per-tenant", "acme"), 12, 10},
		{"explicit other", explicit("per-tenant", "other"), 4, 2},
		{"explicit bulk, unlimited", explicit("per-tenant", "bulk"), 5, 5},
		{"explicit Acme", explicit("per-tenant", "Acme"), 3, 2},
		{"explicit ' acme'", explicit("per-tenant", " acme"), 3, 2},
		{"explicit 'acme '", explicit("per-tenant", "acme "), 3, 2},
		{"explicit ac%6De", explicit("per-tenant", "ac%6De"), 3, 2},
		{"explicit acme under another name", explicit("per-tenant-2", "acme-2"), 3, 2},
		{"explicit 192.0.2.1 under per-ip", explicit("per-ip", "192.0.2.1"), 5, 4},
		{"policy acme", `{"request": {"path": "/", "ip": "203.0.113.1", "headers": {"X-Tenant": "acme"}}}`, 12, 10},
		{"policy ACME", `{"request": {"path": "/", "ip": "203.0.113.2", "headers": {"X-Tenant": "ACME"}}}`, 3, 2},
		{"policy ::ffff:192.0.2.1", `{"request": {"path": "/ip/", "ip": "::ffff:192.0.2.1"}}`, 5, 4},
	} {
		if got := allowed(c.n, c.body, 200); got != c.ok {
			t.Errorf("%s: %d of %d allowed, want %d", c.what, got, c.n, c.ok)
		}
	}
	// A key that holds a percent sign is written %25 in the path: the
	// override of "x%41" is not one of "xA".
	if code, body := call(t, "PUT", admin+"/admin/overrides/per-tenant/x%2541", "s3cret", `{"scale": 3}`); code != 200 || !strings.Contains(body, `"key":"x%41"`) {
		t.Fatalf("PUT x%%2541: %d %s", code, body)
	}
	if got := allowed(7, explicit("per-tenant", "x%41"), 200); got != 6 {
		t.Errorf("explicit x%%41 under its own override: %d of 7, want 6", got)
	}
	if got := allowed(3, explicit("per-tenant", "xA"), 200); got != 2 {
		t.Errorf("explicit xA: %d of 3, want 2", got)
	}
	// An unlimited override leaves no check to run: the answer holds no
	// decision for it.
	if code, body := call(t, "POST", api+"/v1/check", "s3cret", explicit("per-tenant", "bulk")); code != 200 || !strings.Contains(body, `"decisions":[]`) {
		t.Errorf("explicit bulk: %d %s, want allowed without decisions", code, body)
	}

	for _, hostile := range []struct{ method, path, body string }{
		{"PUT", "/admin/overrides/per-tenant/evil", `{"scale": 100}`},
		{"PUT", "/v1/overrides/per-tenant/evil", `{"scale": 100}`},
		{"POST", "/v1/check", `{"checks": [{"name": "per-tenant", "key": "evil", "limit": {"algorithm": "fixed_window", "rate": "2/h"}, "scale": 100}]}`},
		{"POST", "/v1/check", `{"request": {"path": "/", "ip": "203.0.113.3", "headers": {"X-Tenant": "evil"}}, "override": {"scale": 100}}`},
	} {
		code, resp := call(t, hostile.method, api+hostile.path, "s3cret", hostile.body)
		if code < 400 || code > 499 {
			t.Errorf("%s %s on the decision API: %d %s, want a 4xx", hostile.method, hostile.path, code, resp)
		}
	}
	if got := allowed(3, explicit("per-tenant", "evil"), 200); got != 2 {
		t.Errorf("evil after trying to set an override through the decision API: %d of 3, want 2", got)
	}
	_, list := call(t, "GET", admin+"/admin/overrides", "s3cret", "")
	if !strings.Contains(list, "acme") || strings.Contains(list, "evil") {
		t.Errorf("GET /admin/overrides lists an override the decision API set: %s", list)
	}
}
