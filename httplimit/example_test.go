package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	clientIP := &httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, // the load balancers
	}
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
		{Name: "global", Key: httplimit.Global, Limit: sluice.GCRA(sluice.PerSecond(5000), 5000)},
		{Name: "per-ip", Key: httplimit.ByIP(clientIP), Limit: sluice.SlidingWindow(2, time.Minute)},
	}})
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "global";q=5000;w=1, "per-ip";q=2;w=60
	// 200 "global";q=5000;w=1, "per-ip";q=2;w=60
	// 429 "global";q=5000;w=1, "per-ip";q=2;w=60
}

// An LLM endpoint whose cost, in tokens, is known only once the model has
// answered: each call reserves 500 of the user's 10,000 tokens a minute,
// and the X-Tokens-Used header the handler sets settles what it used. A
// call that used more than it reserved is charged in full (into debt), so
// the budget stops the user within one call's overrun; X-Tokens-Used is
// stripped from what the client sees.
func Example_settle() {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC) // a clock that stands still, for the output
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	defer store.Close()
	budget := sluice.TokenBucket(sluice.PerMinute(10000), 10000)
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{{
		Name: "tokens", Key: httplimit.ByHeader("X-User"), Limit: budget,
		Reserve: 500,
		Late:    &decide.LateCost{Header: "X-Tokens-Used", Max: 8000, Strip: true},
	}}})
	if err != nil {
		panic(err)
	}
	used := []string{"1200", "4000", "5000", "300"}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", used[0]) // what the model reported
		fmt.Fprint(w, "The answer is 42.")
	}))
	for len(used) > 0 {
		r := httptest.NewRequest("POST", "/v1/chat", nil)
		r.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
			break
		}
		fmt.Printf("%d used %s, the client sees X-Tokens-Used: %q\n", w.Code, used[0], w.Header().Get("X-Tokens-Used"))
		used = used[1:]
	}
	// Output:
	// 200 used 1200, the client sees X-Tokens-Used: ""
	// 200 used 4000, the client sees X-Tokens-Used: ""
	// 200 used 5000, the client sees X-Tokens-Used: ""
	// 429 Retry-After: 5
}

// Per client IP on a whole ServeMux and per user on one route: the two
// middlewares stack. Each response lists the limits of both, and the
// orders the per-user limit refuses are not charged to the client's IP:
// after one order and two refused, the IP has 3 of its 5 left after the
// next request, not 1.
func Example_stacked() {
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC) // a clock that stands still, for the output
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	defer store.Close()
	limiter := sluice.New(store)
	perIP, err := httplimit.New(limiter, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "per-ip", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(5, time.Hour)},
	}})
	if err != nil {
		panic(err)
	}
	perUser, err := httplimit.New(limiter, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.FixedWindow(1, time.Hour)},
	}})
	if err != nil {
		panic(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("POST /orders", perUser(ok))
	mux.Handle("GET /", ok)
	handler := perIP(mux)

	for _, method := range []string{"POST", "POST", "POST", "GET"} {
		r := httptest.NewRequest(method, "/orders", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		r.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(method, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// POST 200 "per-ip";r=4;t=3600, "per-user";r=0;t=3600
	// POST 429 "per-ip";r=4;t=3600, "per-user";r=0;t=3600
	// POST 429 "per-ip";r=4;t=3600, "per-user";r=0;t=3600
	// GET 200 "per-ip";r=3;t=3600
}

// Reads are limited (2 an hour per client) only while the client's writes
// use more than 80% of theirs (8 of 10): Sentinel's RELATE. One list holds
// both limits; the entry each route marks keeps writes and reads apart
// (Limit.Entry), and reads look at the writes counter of the same client
// (When). Without busy writes, reads are not checked, and their limit is
// missing from RateLimit-Policy.
func ExampleLimit_when() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
		{Name: "writes", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(10, time.Hour), Entry: "write"},
		{Name: "reads", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(2, time.Hour), Entry: "read",
			When: &decide.When{Limit: "writes", Above: 800}},
	}})
	if err != nil {
		panic(err)
	}
	limited := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entry := map[string]string{"GET": "read", "POST": "write"}[r.Method]
		limited.ServeHTTP(w, r.WithContext(sluice.WithEntry(r.Context(), entry)))
	})
	send := func(method, client string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/items", nil)
		r.RemoteAddr = client + ":4711"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}
	w := send("GET", "203.0.113.7")
	fmt.Printf("writes idle: %d %q\n", w.Code, w.Header().Get("RateLimit-Policy"))
	for range 9 {
		send("POST", "198.51.100.1")
	}
	for range 3 {
		w := send("GET", "198.51.100.1")
		fmt.Printf("writes busy: %d %q\n", w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// writes idle: 200 ""
	// writes busy: 200 "\"reads\";q=2;w=3600"
	// writes busy: 200 "\"reads\";q=2;w=3600"
	// writes busy: 429 "\"reads\";q=2;w=3600"
}
