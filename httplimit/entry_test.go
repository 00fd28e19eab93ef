package httplimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
