package httplimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestEntry: a middleware marks the requests of its route as coming
// through its entry; a limit further in, around a handler both routes
// share, counts only those (2 an hour), not the requests of the other
// route, and sees the entry of the middleware further out when two mark.
func TestEntry(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limiter := sluice.New(store)
	mw := func(cfg httplimit.Config) func(http.Handler) http.Handler {
		cfg.Logger = slog.New(slog.DiscardHandler)
		m, err := httplimit.New(limiter, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	entry := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, sluice.EntryFrom(r.Context())) })
	orders := mw(httplimit.Config{Limits: []httplimit.Limit{
		{Name: "orders-from-checkout", Key: httplimit.Global, Limit: sluice.FixedWindow(2, time.Hour), Entry: "checkout"},
	}})(entry)
	marks := func(name string) func(http.Handler) http.Handler {
		return mw(httplimit.Config{Entry: name, Limits: []httplimit.Limit{
			{Name: name + "-ip", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(100, time.Hour)},
		}})
	}
	mux := http.NewServeMux()
	mux.Handle("/checkout/", marks("checkout")(orders))
	mux.Handle("/browse/", marks("browse")(orders))
	mux.Handle("/nested/", marks("checkout")(marks("inner")(orders)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for i, want := range []int{200, 200, 429} {
		if resp, body := get(t, srv.URL+"/checkout/pay"); resp.StatusCode != want || want == 200 && body != "checkout" {
			t.Fatalf("checkout request %d: %d %q, want %d", i+1, resp.StatusCode, body, want)
		}
	}
	for i := range 4 {
		if resp, body := get(t, srv.URL+"/browse/x"); resp.StatusCode != 200 || body != "browse" {
			t.Fatalf("browse request %d: %d %q, want 200 through browse", i+1, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, srv.URL+"/nested/x"); resp.StatusCode != 429 {
		t.Fatalf("nested under checkout: %d, want 429 (the first entry counts)", resp.StatusCode)
	}
}

// TestWhen: a client's reads (2 an hour) are limited only while its
// writes use more than 80% of theirs (8 of 10); writes and reads are one
// list, kept apart by the entry a middleware further out marks on each
// route. A list whose relations cannot be resolved is refused.
func TestWhen(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limiter := sluice.New(store)
	limits := []httplimit.Limit{
		{Name: "writes", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(10, time.Hour), Entry: "write"},
		{Name: "reads", Key: httplimit.ByIP(nil), Limit: sluice.FixedWindow(2, time.Hour), Entry: "read", When: &decide.When{Limit: "writes", Above: 800}},
	}
	inner, err := httplimit.New(limiter, httplimit.Config{Limits: limits, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ok := inner(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	mark := func(entry string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ok.ServeHTTP(w, r.WithContext(sluice.WithEntry(r.Context(), entry)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items", mark("read"))
	mux.Handle("POST /items", mark("write"))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	read := func() int {
		resp, _ := get(t, srv.URL+"/items")
		return resp.StatusCode
	}
	for i := range 5 {
		if s := read(); s != 200 {
			t.Fatalf("read %d while writes are idle: %d", i+1, s)
		}
	}
	for i := range 9 {
		resp, err := http.Post(srv.URL+"/items", "text/plain", nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("write %d: %v %v", i+1, resp, err)
		}
		resp.Body.Close()
	}
	time.Sleep(100 * time.Millisecond) // decide.Config.RelateFor: the last read's peek is stale
	if got := []int{read(), read(), read()}; !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("reads while writes are at 9 of 10: %v, want [200 200 429]", got)
	}
	limits[1].When.Limit = "reads"
	if _, err := httplimit.New(limiter, httplimit.Config{Limits: limits}); err == nil {
		t.Fatal("a limit relating to itself: accepted")
	}
}
