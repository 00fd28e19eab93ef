package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// middleware returns httplimit.New's middleware for store and cfg.
func middleware(t *testing.T, store sluice.Store, cfg httplimit.Config) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(sluice.New(store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func memStore(t *testing.T) *memstore.Store {
	t.Helper()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

// hourly is a fixed window of n an hour.
func hourly(n int64) sluice.Limit { return sluice.FixedWindow(n, time.Hour) }

// perIP and perUser are the two limits a newcomer stacks: per client IP
// around the whole router, per user (X-User) around one route.
func perIP(n int64) []httplimit.Limit {
	return []httplimit.Limit{{Name: "per-ip", Key: httplimit.ByIP(nil), Limit: hourly(n)}}
}

func perUser(n int64) []httplimit.Limit {
	return []httplimit.Limit{{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: hourly(n)}}
}

// stackedMux serves /orders behind inner and every other path without it,
// all behind outer: the shape of per-IP on a ServeMux and per-user on one
// route. ok counts the handler's calls.
func stackedMux(outer, inner func(http.Handler) http.Handler, ok *int) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { *ok++; io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/orders", inner(h))
	mux.Handle("/", h)
	return outer(mux)
}

// serve sends one request to h and returns its response.
func serve(h http.Handler, path string, headers ...string) *http.Response {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "203.0.113.7:4711"
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// fields matches a response's RateLimit-Policy and RateLimit against
// patterns in which `T` stands for any whole number of seconds.
func fields(t *testing.T, resp *http.Response, policy, rateLimit string) {
	t.Helper()
	if got := resp.Header.Get("RateLimit-Policy"); got != policy {
		t.Errorf("RateLimit-Policy %q, want %q", got, policy)
	}
	re := "^" + regexp.MustCompile(`T`).ReplaceAllString(regexp.QuoteMeta(rateLimit), `[0-9]+`) + "$"
	if got := resp.Header.Get("RateLimit"); !regexp.MustCompile(re).MatchString(got) {
		t.Errorf("RateLimit %q, want %q", got, rateLimit)
	}
}

// TestStackedServeMux: per-IP (5 an hour) around a ServeMux, per-user (1 an
// hour) around /orders. The responses carry both limits' fields, and the
// requests the per-user limit refuses are not charged to per-IP: after one
// admitted order and three refused, per-IP has 4 left for the next
// request, not 1. On one store and on two.
func TestStackedServeMux(t *testing.T) {
	for name, stores := range map[string][2]sluice.Store{
		"one store":  {memStore(t), nil},
		"two stores": {memStore(t), memStore(t)},
		"redisstore": {stores(t)["redisstore"], nil},
	} {
		t.Run(name, func(t *testing.T) {
			inner := stores[1]
			if inner == nil {
				inner = stores[0]
			}
			ok := 0
			app := stackedMux(middleware(t, stores[0], httplimit.Config{Limits: perIP(5)}),
				middleware(t, inner, httplimit.Config{Limits: perUser(1)}), &ok)
			resp := serve(app, "/orders", "X-User", "ann")
			if resp.StatusCode != 200 {
				t.Fatalf("first order: %d", resp.StatusCode)
			}
			fields(t, resp, `"per-ip";q=5;w=3600, "per-user";q=1;w=3600`, `"per-ip";r=4;t=T, "per-user";r=0;t=T`)
			for i := range 3 {
				resp := serve(app, "/orders", "X-User", "ann")
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("order %d: %d, Retry-After %q; want 429 from per-user", i+2, resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				fields(t, resp, `"per-ip";q=5;w=3600, "per-user";q=1;w=3600`, `"per-ip";r=4;t=T, "per-user";r=0;t=T`)
			}
			resp = serve(app, "/")
			if resp.StatusCode != 200 {
				t.Fatalf("a request to another route: %d", resp.StatusCode)
			}
			fields(t, resp, `"per-ip";q=5;w=3600`, `"per-ip";r=3;t=T`)
			if ok != 2 {
				t.Fatalf("the handler ran %d times, want 2", ok)
			}
		})
	}
}

// TestStackedOuterCounts: a client cannot pass the outer limit uncounted by
// choosing the route with the inner limit, nor by sending each request as
// another user; the outer limit alone refuses, and then nothing further in
// is charged; a route without an inner middleware is charged once.
func TestStackedOuterCounts(t *testing.T) {
	mem := memStore(t)
	ok := 0
	app := stackedMux(middleware(t, mem, httplimit.Config{Limits: perIP(4)}),
		middleware(t, mem, httplimit.Config{Limits: perUser(1)}), &ok)
	for i, user := range []string{"u1", "u2", "u3"} {
		if resp := serve(app, "/orders", "X-User", user); resp.StatusCode != 200 {
			t.Fatalf("order %d as %s: %d", i, user, resp.StatusCode)
		}
	}
	if resp := serve(app, "/"); resp.StatusCode != 200 {
		t.Fatalf("the fourth request: %d", resp.StatusCode)
	}
	for _, path := range []string{"/orders", "/"} {
		resp := serve(app, path, "X-User", "u4")
		if resp.StatusCode != 429 {
			t.Fatalf("%s past per-ip: %d", path, resp.StatusCode)
		}
		fields(t, resp, `"per-ip";q=4;w=3600`, `"per-ip";r=0;t=T`)
	}
	if ok != 4 {
		t.Fatalf("the handler ran %d times, want 4", ok)
	}
	// u4 was refused by per-ip before per-user saw it: it has its order.
	fresh := stackedMux(middleware(t, mem, httplimit.Config{Limits: perIP(100)}),
		middleware(t, mem, httplimit.Config{Limits: perUser(1)}), &ok)
	if resp := serve(fresh, "/orders", "X-User", "u4"); resp.StatusCode != 200 {
		t.Fatalf("u4's first admitted order: %d", resp.StatusCode)
	}
}

// TestStackedSubRequest: a handler that dispatches a request of its own
// (a batch endpoint calling its router with the request's context) is
// charged once further out whatever its sub-requests get: a refusal of a
// sub-request by the inner limit undoes nothing of the outer request,
// which goes on.
func TestStackedSubRequest(t *testing.T) {
	mem := memStore(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/orders", middleware(t, mem, httplimit.Config{Limits: perUser(1)})(h))
	mux.HandleFunc("/batch", func(w http.ResponseWriter, r *http.Request) {
		sub := httptest.NewRequestWithContext(r.Context(), "GET", "/orders", nil)
		sub.Header.Set("X-User", "ann")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, sub)
		io.WriteString(w, rec.Result().Status)
	})
	app := middleware(t, mem, httplimit.Config{Limits: perIP(3)})(mux)
	serve(app, "/orders", "X-User", "ann") // ann's one order
	for i := range 2 {
		if resp := serve(app, "/batch"); resp.StatusCode != 200 {
			t.Fatalf("batch %d: %d", i, resp.StatusCode)
		}
	}
	if resp := serve(app, "/batch"); resp.StatusCode != 429 {
		t.Fatalf("the fourth request past per-ip (3): %d", resp.StatusCode)
	}
}

// TestStackedThreeDeep: per-IP around everything, per-user around /api/,
// per-route around /api/orders. The innermost refusal undoes both charges
// further out; the fields list the three limits.
func TestStackedThreeDeep(t *testing.T) {
	mem := memStore(t)
	mw := func(name string, n int64, key httplimit.KeyFunc) func(http.Handler) http.Handler {
		return middleware(t, mem, httplimit.Config{Limits: []httplimit.Limit{{Name: name, Key: key, Limit: hourly(n)}}})
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	api := http.NewServeMux()
	api.Handle("/api/orders", mw("orders", 1, httplimit.Global)(h))
	api.Handle("/api/", h)
	mux := http.NewServeMux()
	mux.Handle("/api/", mw("per-user", 10, httplimit.ByHeader("X-User"))(api))
	mux.Handle("/", h)
	app := mw("per-ip", 10, httplimit.ByIP(nil))(mux)
	policy := `"per-ip";q=10;w=3600, "per-user";q=10;w=3600, "orders";q=1;w=3600`
	resp := serve(app, "/api/orders", "X-User", "ann")
	fields(t, resp, policy, `"per-ip";r=9;t=T, "per-user";r=9;t=T, "orders";r=0;t=T`)
	for range 3 {
		resp = serve(app, "/api/orders", "X-User", "ann")
		if resp.StatusCode != 429 {
			t.Fatalf("%d", resp.StatusCode)
		}
		fields(t, resp, policy, `"per-ip";r=9;t=T, "per-user";r=9;t=T, "orders";r=0;t=T`)
	}
	resp = serve(app, "/api/other", "X-User", "ann")
	fields(t, resp, `"per-ip";q=10;w=3600, "per-user";q=10;w=3600`, `"per-ip";r=8;t=T, "per-user";r=8;t=T`)
}

// TestStackedInnerErrors: a key the inner middleware cannot compute leaves
// its limit out under on_error open (the request goes on, charged further
// out), and refuses the request with 503 under closed, charging nothing
// further out; a client's error in the inner (a header sent twice) is a
// 400 that charges nothing either.
func TestStackedInnerErrors(t *testing.T) {
	noKey := func(*http.Request) (string, error) { return "", errors.New("no session store today") }
	for _, tc := range []struct {
		name    string
		mode    sluice.FailureMode
		headers []string
		status  int
		left    string // per-ip's remaining after the request
	}{
		{"open", sluice.FailOpen, nil, 200, "r=4"},
		{"closed", sluice.FailClosed, nil, 503, "r=5"},
		{"header sent twice", sluice.FailOpen, []string{"X-User", "a", "X-User", "b"}, 400, "r=5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memStore(t)
			key := noKey
			if tc.headers != nil {
				key = httplimit.ByHeader("X-User")
			}
			ok := 0
			app := stackedMux(middleware(t, mem, httplimit.Config{Limits: perIP(5)}),
				middleware(t, mem, httplimit.Config{OnError: tc.mode, Limits: []httplimit.Limit{{Name: "per-user", Key: key, Limit: hourly(1)}}}), &ok)
			resp := serve(app, "/orders", tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d, want %d", resp.StatusCode, tc.status)
			}
			// Every response says what is left of per-ip, after any undo.
			fields(t, resp, `"per-ip";q=5;w=3600`, `"per-ip";`+tc.left+`;t=T`)
		})
	}
}

// shadowSource plans an enforced per-IP limit and a shadow one.
type shadowSource struct{}

func (shadowSource) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	return append(dst,
		decide.Check{Name: "per-ip", Key: "ip", Limit: hourly(5), Cost: 1},
		decide.Check{Name: "trial", Key: "trial", Limit: hourly(5), Cost: 1, Shadow: true}), nil
}

// TestStackedShadowAndLate: what an outer middleware charged beyond its
// enforced limits is given back too when the inner one refuses: its
// shadow limits (checked only for requests that go on), and a reservation
// whose cost the response was to report, which is neither kept nor
// settled (no cost reported: on_missing would charge the max).
func TestStackedShadowAndLate(t *testing.T) {
	mem := memStore(t)
	lim := sluice.New(mem)
	inner := middleware(t, mem, httplimit.Config{Limits: perUser(1)})
	late := middleware(t, mem, httplimit.Config{Limits: []httplimit.Limit{{
		Name: "tokens", Key: httplimit.Global, Limit: hourly(100), Reserve: 10,
		Late: &decide.LateCost{Header: "X-Tokens", Missing: decide.MissingMax, Max: 50},
	}}})
	shadow := middleware(t, mem, httplimit.Config{Source: shadowSource{}})
	app := late(stackedMux(shadow, inner, new(int)))
	serve(app, "/orders", "X-User", "ann")
	for range 3 {
		if resp := serve(app, "/orders", "X-User", "ann"); resp.StatusCode != 429 {
			t.Fatalf("%d", resp.StatusCode)
		}
	}
	for key, want := range map[string]struct {
		limit sluice.Limit
		left  int64
	}{
		"ip":    {hourly(5), 4},
		"trial": {hourly(5), 4},
		string(decide.AppendKey(nil, "tokens", "global")): {hourly(100), 50}, // the first request's max
	} {
		d, err := lim.AllowN(context.Background(), key, want.limit, 0)
		if err != nil || d.Remaining != want.left {
			t.Errorf("%s: %d left (%v), want %d", key, d.Remaining, err, want.left)
		}
	}
}

// TestStackedDelay: a request the outer leaky bucket delays and the inner
// limit refuses gives its place in the queue back, so the next request is
// not delayed by it.
func TestStackedDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		outer := middleware(t, mem, httplimit.Config{Limits: []httplimit.Limit{
			{Name: "shaped", Key: httplimit.Global, Limit: sluice.LeakyBucket(sluice.PerSecond(1), 3)},
		}})
		app := stackedMux(outer, middleware(t, mem, httplimit.Config{Limits: perUser(1)}), new(int))
		start := time.Now()
		serve(app, "/orders", "X-User", "ann") // no wait: the queue was empty
		if resp := serve(app, "/orders", "X-User", "ann"); resp.StatusCode != 429 {
			t.Fatalf("%d", resp.StatusCode) // after 1s in the queue
		}
		if el := time.Since(start); el != time.Second {
			t.Fatalf("the refused request waited until %s, want 1s", el)
		}
		serve(app, "/orders", "X-User", "bob") // its slot: 1s, as if the refused one never queued
		if el := time.Since(start); el != time.Second {
			t.Fatalf("bob was served at %s, want 1s (2s: the refused request kept its place)", el)
		}
	})
}

// TestStackedLegacyHeaders: X-RateLimit-* name the limit closest to
// refusing of all the stacked middlewares.
func TestStackedLegacyHeaders(t *testing.T) {
	mem := memStore(t)
	app := stackedMux(middleware(t, mem, httplimit.Config{Limits: perIP(5), LegacyHeaders: true}),
		middleware(t, mem, httplimit.Config{Limits: perUser(2), LegacyHeaders: true}), new(int))
	for i, want := range []string{"2 1", "2 0", "2 0"} {
		resp := serve(app, "/orders", "X-User", "ann")
		if got := resp.Header.Get("X-RateLimit-Limit") + " " + resp.Header.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("request %d: X-RateLimit-Limit and -Remaining %q, want %q", i, got, want)
		}
	}
	resp := serve(app, "/")
	if got := resp.Header.Get("X-RateLimit-Limit") + " " + resp.Header.Get("X-RateLimit-Remaining"); got != "5 2" {
		t.Errorf("per-ip alone: %q, want 5 2", got)
	}
}
