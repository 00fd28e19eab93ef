package policy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
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

// TestPlanHostileKeyParts: a key part a client sends in two minds (twice,
// malformed, or under a name other servers read as the same header) is a
// 400, never a skipped limit or a key of the client's choosing.
func TestPlanHostileKeyParts(t *testing.T) {
	p, err := policy.Parse("parts.yaml", []byte(`
rules:
  - name: api
    limits:
      - {name: by-header, key: header:X-User-ID, algorithm: gcra, rate: 10/s}
      - {name: by-query, key: query:user, algorithm: gcra, rate: 10/s}
      - {name: by-cookie, key: cookie:session, algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc    string
		target  string
		headers [][2]string
		status  int    // 0: planned
		key     string // the limit planned, then
	}{
		{"header twice", "/", [][2]string{{"X-User-ID", "a"}, {"X-User-ID", "b"}}, 400, ""},
		{"header with underscores", "/", [][2]string{{"X_User_ID", "alice"}}, 400, ""},
		{"header both ways", "/", [][2]string{{"X-User-ID", "a"}, {"x_user_id", "b"}}, 400, ""},
		{"query twice", "/?user=alice&user=mallory", nil, 400, ""},
		{"query malformed", "/?user=alice%zz", nil, 400, ""},
		{"query semicolon", "/?user=alice;x=1", nil, 400, ""},
		{"cookie twice", "/", [][2]string{{"Cookie", "session=a; session=b"}}, 400, ""},
		{"cookie twice, two lines", "/", [][2]string{{"Cookie", "session=a"}, {"Cookie", "session=b"}}, 400, ""},
		{"cookie a strict parser rejects is still counted", "/", [][2]string{{"Cookie", `session=s1"x`}}, 0, "by-cookie"},
		{"quoted cookie", "/", [][2]string{{"Cookie", `session="s1"`}}, 0, "by-cookie"},
		{"query once", "/?user=alice", nil, 0, "by-query"},
	} {
		r := httptest.NewRequest("GET", "http://x"+tc.target, nil)
		if strings.Contains(tc.target, "%zz") || strings.Contains(tc.target, ";") {
			r.URL.RawQuery = tc.target[2:]
		}
		for _, h := range tc.headers {
			k := h[0]
			if !strings.Contains(k, "_") {
				k = http.CanonicalHeaderKey(k)
			}
			r.Header[k] = append(r.Header[k], h[1])
		}
		got, err := p.Plan(r, nil)
		ce, isClient := decide.AsClientError(err)
		switch {
		case tc.status != 0 && (!isClient || ce.HTTPStatus() != tc.status):
			t.Errorf("%s: %v (planned %d), want a %d", tc.desc, err, len(got), tc.status)
		case tc.status == 0 && (err != nil || len(got) != 1 || got[0].Name != tc.key):
			t.Errorf("%s: %v, planned %+v; want %s alone", tc.desc, err, got, tc.key)
		}
	}
	// The same cookie value quoted or not is one key.
	a := httptest.NewRequest("GET", "/", nil)
	a.Header.Set("Cookie", `session="s1"`)
	b := httptest.NewRequest("GET", "/", nil)
	b.Header.Set("Cookie", `session=s1`)
	pa, _ := p.Plan(a, nil)
	pb, _ := p.Plan(b, nil)
	if len(pa) != 1 || len(pb) != 1 || pa[0].Key != pb[0].Key {
		t.Fatalf("quoted and plain cookie: %+v, %+v", pa, pb)
	}
}

// TestMaxCost: a cost header is a whole number from 1 to the limit's
// max_cost (its capacity without one), sent once under its own name.
func TestMaxCost(t *testing.T) {
	p, err := policy.Parse("cost.yaml", []byte(`
rules:
  - name: api
    limits:
      - {name: weighted, key: global, algorithm: token_bucket, rate: 100/s, cost: "header:X-Cost", max_cost: 5}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		headers [][2]string
		cost    int64 // 0: a 400
	}{
		{nil, 1},
		{[][2]string{{"X-Cost", "5"}}, 5},
		{[][2]string{{"X-Cost", "6"}}, 0},
		{[][2]string{{"X-Cost", "100"}}, 0},
		{[][2]string{{"X-Cost", "0"}}, 0},
		{[][2]string{{"X_Cost", "1"}}, 0}, // an upstream may read it as X-Cost
		{[][2]string{{"X-Cost", "1"}, {"X-Cost", "5"}}, 0},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, h := range tc.headers {
			r.Header[h[0]] = append(r.Header[h[0]], h[1])
		}
		got, err := p.Plan(r, nil)
		_, isClient := decide.AsClientError(err)
		switch {
		case tc.cost == 0 && !isClient:
			t.Errorf("%q: %v, %+v; want a client error", tc.headers, err, got)
		case tc.cost != 0 && (err != nil || len(got) != 1 || got[0].Cost != tc.cost):
			t.Errorf("%q: %v, %+v; want cost %d", tc.headers, err, got, tc.cost)
		}
	}
	for _, bad := range []string{
		`{name: w, key: global, algorithm: gcra, rate: 10/s, max_cost: 5}`,
		`{name: w, key: global, algorithm: gcra, rate: 10/s, cost: "header:X-Cost", max_cost: 11}`,
		`{name: w, key: global, algorithm: gcra, rate: 10/s, cost: "header:X-Cost", max_cost: 0}`,
	} {
		if _, err := policy.Parse("bad.yaml", []byte("rules:\n  - name: a\n    limits: ["+bad+"]\n"), policy.Options{}); err == nil {
			t.Errorf("%s: loaded", bad)
		}
	}
}
