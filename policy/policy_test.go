package policy_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// stores returns a fresh memstore and a redisstore on the test Redis.
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

func serve(t *testing.T, src httplimit.Source) *httptest.Server {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return serveOn(t, store, src)
}

func serveOn(t *testing.T, store sluice.Store, src httplimit.Source) *httptest.Server {
	t.Helper()
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{Source: src, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reports/slow" {
			time.Sleep(50 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url string, headers ...string) (*http.Response, string) {
	t.Helper()
	r, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			r.Host = headers[i+1]
			continue
		}
		r.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func count(t *testing.T, n int, method, url string, headers ...string) (ok, refused int) {
	for range n {
		resp, _ := do(t, method, url, headers...)
		switch resp.StatusCode {
		case 200:
			ok++
		default:
			refused++
		}
	}
	return ok, refused
}

func TestExamplePolicyEndToEnd(t *testing.T) {
	p, err := policy.Load("testdata/example.yaml", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) { examplePolicy(t, serveOn(t, store, p)) })
	}
}

func examplePolicy(t *testing.T, srv *httptest.Server) {

	// Per user: 10 per second; the eleventh is refused by that limit.
	if ok, refused := count(t, 10, "POST", srv.URL+"/api/orders/1", "X-User-ID", "ann"); ok != 10 || refused != 0 {
		t.Fatalf("ann: %d ok, %d refused", ok, refused)
	}
	resp, body := do(t, "POST", srv.URL+"/api/orders/1", "X-User-ID", "ann")
	var doc map[string]any
	json.Unmarshal([]byte(body), &doc)
	if resp.StatusCode != 429 || doc["limit"] != "orders-per-user" {
		t.Fatalf("11th for ann: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"orders-global";q=5000;w=1, "orders-per-user";q=10;w=1, "orders-per-ip";q=50;w=1` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	// A VIP gets ten times as much; an internal caller is not limited per
	// user (the per-IP limit of 50 still applies to everyone from this IP,
	// so both stay under it).
	if ok, _ := count(t, 15, "POST", srv.URL+"/api/orders/2", "X-User-ID", "vip-user", "X-Plan", "vip"); ok != 15 {
		t.Fatalf("vip: %d of 15 ok", ok)
	}
	if ok, _ := count(t, 15, "POST", srv.URL+"/api/orders/3", "X-User-ID", "billing-svc", "X-Internal-Caller", "billing"); ok != 15 {
		t.Fatalf("internal caller: %d of 15 ok", ok)
	}
	// Weighted: cost 6 twice is over 10.
	if resp, _ := do(t, "POST", srv.URL+"/api/orders/4", "X-User-ID", "bob", "X-Cost", "6"); resp.StatusCode != 200 {
		t.Fatalf("bob cost 6: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", srv.URL+"/api/orders/4", "X-User-ID", "bob", "X-Cost", "6"); resp.StatusCode != 429 {
		t.Fatalf("bob second cost 6: %d", resp.StatusCode)
	}
	// A cost the client got wrong is its error (400), never an admission.
	for _, cost := range []string{"lots", "0", "-1", "1.5", "999999", "9223372036854775808", "+3", "0x10"} {
		if resp, _ := do(t, "POST", srv.URL+"/api/orders/4", "X-User-ID", "carol", "X-Cost", cost); resp.StatusCode != 400 {
			t.Fatalf("cost header %q: %d, want 400", cost, resp.StatusCode)
		}
	}
	// Another method matches no rule: no limits, no headers.
	if resp, _ := do(t, "GET", srv.URL+"/api/orders/1"); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
		t.Fatalf("GET orders: %d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Concurrency with a custom rejection: 2 slow reports at once, the
	// third gets the rule's 503 body.
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for range 3 {
		wg.Go(func() {
			r, _ := http.NewRequest("GET", srv.URL+"/reports/slow", nil)
			r.AddCookie(&http.Cookie{Name: "session", Value: "s1"})
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				codes <- 0
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 && string(b) != "Too many reports running; try again in a minute.\n" {
				codes <- -1
				return
			}
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[200] != 2 || got[503] != 1 {
		t.Fatalf("reports: %v, want two 200 and one 503 with the rule's body", got)
	}
	// Shadow: never refused.
	if ok, _ := count(t, 40, "GET", srv.URL+"/", "Host", "beta.example.com"); ok != 40 {
		t.Fatalf("shadow rule refused requests: %d of 40 ok", ok)
	}
}

func TestDelayAction(t *testing.T) {
	p, err := policy.Parse("delay.yaml", []byte(`
rules:
  - name: slow-down
    limits:
      - {name: g, key: global, algorithm: gcra, rate: 20/s, burst: 1}
    action: {refuse: delay, max_delay: 120ms}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			srv := serveOn(t, store, p)
			start := time.Now()
			if ok, refused := count(t, 3, "GET", srv.URL+"/"); ok != 3 || refused != 0 {
				t.Fatalf("%d ok %d refused", ok, refused)
			}
			if el := time.Since(start); el < 95*time.Millisecond {
				t.Fatalf("3 requests at 20/s, waiting, took only %s", el)
			}
		})
	}
}

// TestReloadUnderTraffic: a policy replaced in the middle of traffic fails
// no request; the new limits apply; an invalid file keeps the old policy.
func TestReloadUnderTraffic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	write := func(s string) {
		// Write and rename, as editors and Kubernetes do.
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	v1 := "rules:\n  - name: api\n    limits:\n      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 3, window: 1h}\n"
	v2 := strings.ReplaceAll(v1, "limit: 3", "limit: 1000")
	write(v1)
	var logs strings.Builder
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(b)
	}), nil))
	h, err := policy.NewHolder(path, policy.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, h)
	if ok, refused := count(t, 5, "GET", srv.URL, "X-User", "ann"); ok != 3 || refused != 2 {
		t.Fatalf("v1: %d ok %d refused", ok, refused)
	}
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(srv.URL + "?g=" + string(rune('a'+g)))
				if err != nil || resp.StatusCode >= 500 {
					failures.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		})
	}
	for range 5 {
		write(v2)
		if err := h.Reload(); err != nil {
			t.Fatal(err)
		}
		write(v1)
		if err := h.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	write(v2)
	if err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	write("rules: [oops")
	if err := h.Reload(); err == nil || h.Failures() != 1 {
		t.Fatalf("invalid reload: err %v, failures %d", err, h.Failures())
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed during reloads", n)
	}
	// The active policy is v2 (limit 1000) with fresh state for the
	// changed limit: bob gets far more than 3.
	if ok, _ := count(t, 10, "GET", srv.URL, "X-User", "bob"); ok != 10 {
		t.Fatalf("after reload to v2: %d of 10 ok", ok)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "policy: loaded"); n != 12 {
		t.Fatalf("%d load snapshots logged, want 12:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "reload failed; the previous policy stays active") {
		t.Fatalf("failed reload not logged:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
