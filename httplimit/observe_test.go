package httplimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// TestObserve checks that every decided request is observed once per check,
// with the limit that decided it and the right outcome.
func TestObserve(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var mu sync.Mutex
	var seen []string
	failKey := errors.New("no key today")
	srv, _ := server(t, store, httplimit.Config{
		Limits: []httplimit.Limit{
			{Name: "two", Key: httplimit.Global, Limit: sluice.FixedWindow(2, time.Minute)},
			{Name: "user", Key: func(r *http.Request) (string, error) {
				if r.Header.Get("X-Fail") != "" {
					return "", failKey
				}
				return r.Header.Get("X-User"), nil
			}, Limit: sluice.FixedWindow(5, time.Minute)},
		},
		Observe: func(_ *http.Request, o decide.Observation) {
			mu.Lock()
			defer mu.Unlock()
			s := o.Limit + " " + o.Outcome.String()
			if o.Err != nil {
				s += " " + o.Err.Error()
			}
			seen = append(seen, s)
		},
	})
	get(t, srv.URL, "X-User", "u1")
	get(t, srv.URL)
	get(t, srv.URL, "X-User", "u1")
	get(t, srv.URL, "X-Fail", "1")
	// The first request leaves "two" at 1 remaining and "user" at 4: the
	// deciding limit is the one closest to refusing, "two". A key that
	// cannot be computed leaves its limit out (on_error: open), and the
	// others are still checked.
	want := []string{
		"two admitted",
		"two admitted",
		"two refused",
		`user admitted_uncounted limit "user": key: no key today`,
		"two refused",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("observed %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("observation %d = %q, want %q", i, seen[i], want[i])
		}
	}
}

// TestWaitClientGone: a client that gives up while its request waits for
// room gets nothing more: the handler does not run for it and nothing is
// logged as admitted.
func TestWaitClientGone(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	srv, calls := server(t, store, httplimit.Config{
		Source: waitSource{sluice.TokenBucket(sluice.Per(1, 10*time.Second), 1)},
		Logger: logger,
	})
	get(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the second request was answered within 200ms; it should wait ~10s for room")
	}
	time.Sleep(100 * time.Millisecond) // let the server notice
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (not for the client that left)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "admitting") {
		t.Errorf("logged an admission for a client that left:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestDegradedHeader: a decision a failure mode made (the store behind
// failover is gone) is marked in the response when DegradedHeader is set,
// and only then.
func TestDegradedHeader(t *testing.T) {
	gone, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close() // every call now fails with sluice.ErrClosed
	store, err := failover.New(gone, failover.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	healthy, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	limits := []httplimit.Limit{{Name: "g", Key: httplimit.Global, Limit: sluice.FixedWindow(5, time.Minute)}}
	for _, c := range []struct {
		store  sluice.Store
		header string
		want   string
	}{
		{store, "Sluice-Degraded", "true"},
		{store, "", ""},
		{healthy, "Sluice-Degraded", ""},
	} {
		srv, _ := server(t, c.store, httplimit.Config{Limits: limits, DegradedHeader: c.header})
		resp, _ := get(t, srv.URL)
		if got := resp.Header.Get("Sluice-Degraded"); resp.StatusCode != 200 || got != c.want {
			t.Errorf("DegradedHeader %q: status %d, Sluice-Degraded %q, want 200 and %q", c.header, resp.StatusCode, got, c.want)
		}
	}
}
