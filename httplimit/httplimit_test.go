package httplimit_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// server runs the middleware in front of a handler that counts its calls, on
// a real HTTP server.
func server(t *testing.T, store sluice.Store, cfg httplimit.Config) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	mw, err := httplimit.New(sluice.New(store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func get(t *testing.T, url string, headers ...string) (*http.Response, string) {
	t.Helper()
	r, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func stores(t *testing.T) map[string]sluice.Store {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	red, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	return map[string]sluice.Store{"memstore": mem, "redisstore": red}
}

// TestAdmitAndRefuse: the exact status, headers and body a client sees.
func TestAdmitAndRefuse(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			srv, calls := server(t, store, httplimit.Config{Limits: []httplimit.Limit{
				{Name: "global", Key: httplimit.Global, Limit: sluice.FixedWindow(100, time.Hour)},
				{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.FixedWindow(2, time.Hour)},
			}})
			for i := range 2 {
				resp, body := get(t, srv.URL, "X-User", "ann")
				if resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if got := resp.Header.Get("RateLimit-Policy"); got != `"global";q=100;w=3600, "per-user";q=2;w=3600` {
					t.Fatalf("RateLimit-Policy: %q", got)
				}
				if got, want := resp.Header.Get("RateLimit"), `"global";r=`; !strings.HasPrefix(got, want) || !strings.Contains(got, `"per-user";r=`+string(rune('1'-i))+";t=") {
					t.Fatalf("RateLimit: %q", got)
				}
			}
			resp, body := get(t, srv.URL, "X-User", "ann")
			if resp.StatusCode != 429 {
				t.Fatalf("third request: %d", resp.StatusCode)
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Fatalf("Retry-After %q", ra)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(body), &doc); err != nil || doc["status"] != 429.0 || doc["limit"] != "per-user" || doc["title"] != "Too Many Requests" {
				t.Fatalf("problem document: %s (%v)", body, err)
			}
			if calls.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2", calls.Load())
			}
			// The refusal charged nothing globally: an anonymous request
			// (only the global limit applies) leaves 97 of 100, not 96.
			resp, _ = get(t, srv.URL)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"global";q=100;w=3600` ||
				!strings.HasPrefix(resp.Header.Get("RateLimit"), `"global";r=97;t=`) {
				t.Fatalf("anonymous: %d %q %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
			}
		})
	}
}

// TestShapingDelay: six requests at once under 20/s are started 50ms apart;
// those that would wait longer than MaxDelay are refused instead.
func TestShapingDelay(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	defer mem.Close()
	srv, _ := server(t, mem, httplimit.Config{
		Limits:   []httplimit.Limit{{Name: "smooth", Key: httplimit.Global, Limit: sluice.LeakyBucket(sluice.PerSecond(20), 10)}},
		MaxDelay: 120 * time.Millisecond,
	})
	start := time.Now()
	codes := make(chan int, 6)
	for range 6 {
		go func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	ok, refused := 0, 0
	for range 6 {
		switch <-codes {
		case 200:
			ok++
		case 429:
			refused++
		}
	}
	if ok != 3 || refused != 3 {
		t.Fatalf("%d admitted, %d refused; want 3 (delays 0, 50, 100ms) and 3 (150ms and more)", ok, refused)
	}
	if el := time.Since(start); el < 95*time.Millisecond {
		t.Fatalf("the admitted requests finished within %s, want the last delayed 100ms", el)
	}
}

func TestStoreErrorFailsOpenOrClosed(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	mem.Close() // every decision now fails with sluice.ErrClosed
	limits := []httplimit.Limit{{Name: "g", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Hour)}}
	open, calls := server(t, mem, httplimit.Config{Limits: limits})
	if resp, _ := get(t, open.URL); resp.StatusCode != 200 || calls.Load() != 1 {
		t.Fatalf("fail open: %d", resp.StatusCode)
	}
	closed, calls2 := server(t, mem, httplimit.Config{Limits: limits, OnError: sluice.FailClosed})
	if resp, body := get(t, closed.URL); resp.StatusCode != 503 || calls2.Load() != 0 || !strings.Contains(body, "unavailable") {
		t.Fatalf("fail closed: %d %s", resp.StatusCode, body)
	}
}

func TestRefusedHook(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	defer mem.Close()
	srv, _ := server(t, mem, httplimit.Config{
		Limits: []httplimit.Limit{{Name: "g", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Hour)}},
		Refused: func(w http.ResponseWriter, r *http.Request, d sluice.Decision, limit string) {
			w.WriteHeader(429)
			io.WriteString(w, "请稍后再试 ("+limit+")")
		},
	})
	get(t, srv.URL)
	resp, body := get(t, srv.URL)
	if resp.StatusCode != 429 || body != "请稍后再试 (g)" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func TestConfigErrors(t *testing.T) {
	l := sluice.New(nil)
	for _, cfg := range []httplimit.Config{
		{},
		{Limits: []httplimit.Limit{{Name: "", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Second)}}},
		{Limits: []httplimit.Limit{{Name: "a\n", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Second)}}},
		{Limits: []httplimit.Limit{{Name: "a", Limit: sluice.FixedWindow(1, time.Second)}}},
		{Limits: []httplimit.Limit{{Name: "a", Key: httplimit.Global, Limit: sluice.FixedWindow(0, time.Second)}}},
		{Limits: []httplimit.Limit{{Name: "a", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Second)}, {Name: "a", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Second)}}},
	} {
		if _, err := httplimit.New(l, cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

// failingSource plans one limit that fails closed, or open.
type failingSource struct{ closed bool }

func (f failingSource) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	mode := sluice.FailOpen
	if f.closed {
		mode = sluice.FailClosed
	}
	return append(dst, decide.Check{Name: "g", Key: "g", Limit: sluice.FixedWindow(1, time.Hour), Cost: 1, OnError: mode}), nil
}

func TestPerLimitFailClosed(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	mem.Close() // every decision fails
	for _, closed := range []bool{false, true} {
		srv, calls := server(t, mem, httplimit.Config{Source: failingSource{closed}})
		resp, _ := get(t, srv.URL)
		if closed && (resp.StatusCode != 503 || calls.Load() != 0 || resp.Header.Get("Retry-After") != "1") {
			t.Fatalf("fail closed: %d, handler ran %d times", resp.StatusCode, calls.Load())
		}
		if !closed && (resp.StatusCode != 200 || calls.Load() != 1) {
			t.Fatalf("fail open: %d", resp.StatusCode)
		}
	}
}

// TestFailClosedRetryAfterFromBreaker: behind package failover, the 503 of a
// fail-closed limit says to retry when the circuit breaker next probes the
// store, not after a fixed second.
func TestFailClosedRetryAfterFromBreaker(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{})
	mem.Close() // every decision fails
	fo, err := failover.New(mem, failover.Config{
		ConsecutiveFailures: 1,
		ProbeInterval:       2500 * time.Millisecond,
		Mode:                func(sluice.Request) failover.Mode { return failover.FailClosed },
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	srv, calls := server(t, fo, httplimit.Config{Source: failingSource{closed: true}})
	for range 2 { // the failing call that opens the breaker, then one it keeps from the store
		resp, _ := get(t, srv.URL)
		if resp.StatusCode != 503 || calls.Load() != 0 || resp.Header.Get("Retry-After") != "3" {
			t.Fatalf("%d, Retry-After %q, handler ran %d times; want 503, 3 (2.5 s to the next probe)", resp.StatusCode, resp.Header.Get("Retry-After"), calls.Load())
		}
	}
}
