package policy_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// TestPlan: which limits apply to which request, under which key, limit and
// cost.
func TestPlan(t *testing.T) {
	p, err := policy.Parse("plan.yaml", []byte(`
trusted_proxies: [10.0.0.0/8]
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: by-route, key: [route, method], algorithm: gcra, rate: 10/s}
      - {name: by-query, key: query:token, algorithm: gcra, rate: 10/s}
      - {name: by-cookie, key: cookie:sid, algorithm: gcra, rate: 10/s}
      - {name: by-func, key: func:tenant, algorithm: gcra, rate: 10/s, cost: 3}
      - name: by-ip
        key: ip
        algorithm: gcra
        rate: 10/s
        overrides:
          - {key: 198.51.100.9, scale: 2}
          - {header: X-Plan, equals: free, scale: 0.5}
          - {header: X-Plan, equals: internal, unlimited: true}
  - name: orders
    match: {methods: [POST], host: shop.example, path: "/api/orders/{id}"}
    limits:
      - {name: orders-host, key: host, algorithm: fixed_window, rate: 5/m, cost: header:X-Cost}
`), policy.Options{Funcs: map[string]httplimit.KeyFunc{
		"tenant": func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		name  string
		count int64
		cost  int64
	}
	for _, tc := range []struct {
		desc string
		req  func() *http.Request
		want []want
	}{
		{"no rule matches /", func() *http.Request { return httptest.NewRequest("GET", "/", nil) }, nil},
		{"route and ip only", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.RemoteAddr = "203.0.113.1:1"
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 10, 1}}},
		{"every part present", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x?token=t1", nil)
			r.AddCookie(&http.Cookie{Name: "sid", Value: "s1"})
			r.Header.Set("X-Tenant", "acme")
			r.RemoteAddr = "203.0.113.1:1"
			return r
		}, []want{{"by-route", 10, 1}, {"by-query", 10, 1}, {"by-cookie", 10, 1}, {"by-func", 10, 3}, {"by-ip", 10, 1}}},
		{"key override via trusted proxy", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.RemoteAddr = "10.1.1.1:1"
			r.Header.Set("X-Forwarded-For", "198.51.100.9")
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 20, 1}}},
		{"spoofed forwarding ignored", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.RemoteAddr = "203.0.113.1:1"
			r.Header.Set("X-Forwarded-For", "198.51.100.9")
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 10, 1}}},
		{"tier halves", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.Header.Set("X-Plan", "free")
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 5, 1}}},
		{"internal is unlimited, through a trusted proxy", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.RemoteAddr = "10.1.1.1:1"
			r.Header.Set("X-Plan", "internal")
			return r
		}, []want{{"by-route", 10, 1}}},
		{"internal sent by a client grants nothing", func() *http.Request {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.Header.Set("X-Plan", "internal")
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 10, 1}}},
		{"two rules, weighted", func() *http.Request {
			r := httptest.NewRequest("POST", "http://shop.example/api/orders/7", nil)
			r.Header.Set("X-Cost", "4")
			return r
		}, []want{{"by-route", 10, 1}, {"by-ip", 10, 1}, {"orders-host", 5, 4}}},
		{"host mismatch", func() *http.Request {
			return httptest.NewRequest("POST", "http://other.example/api/orders/7", nil)
		}, []want{{"by-route", 10, 1}, {"by-ip", 10, 1}}},
	} {
		got, err := p.Plan(tc.req(), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: planned %d limits, want %d: %+v", tc.desc, len(got), len(tc.want), got)
		}
		for i, w := range tc.want {
			if got[i].Name != w.name || got[i].Limit.Count != w.count || got[i].Cost != w.cost {
				t.Errorf("%s: limit %d = %s count %d cost %d, want %+v", tc.desc, i, got[i].Name, got[i].Limit.Count, got[i].Cost, w)
			}
		}
	}
	// Keys: one request's key under a limit differs by every part.
	a, _ := p.Plan(httptest.NewRequest("GET", "/api/x", nil), nil)
	b, _ := p.Plan(httptest.NewRequest("PUT", "/api/x", nil), nil)
	if a[0].Key == b[0].Key {
		t.Fatalf("route+method key ignores the method: %q", a[0].Key)
	}
	if _, err := p.Plan(func() *http.Request {
		r := httptest.NewRequest("POST", "http://shop.example/api/orders/7", nil)
		r.Header.Set("X-Cost", "99")
		return r
	}(), nil); err == nil {
		t.Fatal("a cost header above capacity was accepted")
	}
}
