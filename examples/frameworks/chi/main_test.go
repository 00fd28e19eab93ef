package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// newRouter returns the example's router on a store whose clock stands
// still, so that no limit refills during a test.
func newRouter(t *testing.T) http.Handler {
	t.Helper()
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r, err := router(sluice.New(store))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func send(h http.Handler, method, path, token string) *http.Response {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "203.0.113.7:4711"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// TestStacked: per-IP on the router and per-user on /orders answer as one
// middleware. Every response lists the limits the request passed, and the
// orders per-user refuses are not charged to per-IP: after ann's 5 orders
// and 3 refused, the IP has 20 - 5 - 1 = 14 left for the next request, not
// 11.
func TestStacked(t *testing.T) {
	r := newRouter(t)
	both := `"per-ip";q=20;w=2, "per-user";q=5;w=60`
	for i := range 8 {
		resp := send(r, "POST", "/orders", "token-ann")
		want := 200
		if i >= 5 {
			want = 429
		}
		if resp.StatusCode != want || resp.Header.Get("RateLimit-Policy") != both {
			t.Fatalf("order %d: %d %q, want %d %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), want, both)
		}
	}
	resp := send(r, "GET", "/hello", "")
	if got := resp.Header.Get("RateLimit"); resp.StatusCode != 200 || !regexp.MustCompile(`^"per-ip";r=14;t=[0-9]+$`).MatchString(got) {
		t.Fatalf("hello: %d, RateLimit %q; want per-ip r=14", resp.StatusCode, got)
	}
}

// TestStackedHostile: one client, one IP, trying every route and user: no
// request passes per-IP uncounted. Orders as two users, requests without
// a token (refused by authentication, after per-IP counted them) and
// plain requests share the IP's 20, and then every route is refused.
func TestStackedHostile(t *testing.T) {
	r := newRouter(t)
	tries := []struct{ method, path, token string }{
		{"POST", "/orders", "token-ann"}, {"POST", "/orders", "token-bob"},
		{"POST", "/orders", ""}, {"GET", "/hello", ""}, {"POST", "/orders", "token-ann"},
	}
	passed, refusedByUser := 0, 0
	for i := 0; i < 40; i++ {
		try := tries[i%len(tries)]
		resp := send(r, try.method, try.path, try.token)
		switch {
		case resp.StatusCode == 429 && resp.Header.Get("RateLimit-Policy") == `"per-ip";q=20;w=2`:
			if passed+refusedByUser < 20 {
				t.Fatalf("request %d refused by per-ip after %d passed", i, passed)
			}
		case resp.StatusCode == 429:
			refusedByUser++
		default: // 200, or 401 from authentication
			passed++
		}
	}
	if passed != 20 {
		t.Fatalf("%d requests passed per-IP (20)", passed)
	}
}
