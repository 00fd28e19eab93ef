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
	// Headers that grant more (a VIP tier, an internal caller) are honoured
	// only through the trusted proxies (10.0.0.0/8 here): sent straight
	// from 127.0.0.1 they grant nothing, and the per-user limit of 10
	// holds. TestOverridesNeedTrustedProxy shows them honoured.
	if ok, _ := count(t, 15, "POST", srv.URL+"/api/orders/2", "X-User-ID", "vip-user", "X-Plan", "vip"); ok != 10 {
		t.Fatalf("vip from an untrusted peer: %d of 15 ok, want 10", ok)
	}
	if ok, _ := count(t, 15, "POST", srv.URL+"/api/orders/3", "X-User-ID", "billing-svc", "X-Internal-Caller", "billing"); ok != 10 {
		t.Fatalf("internal caller from an untrusted peer: %d of 15 ok, want 10", ok)
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

// TestOverridesNeedTrustedProxy: an override that grants more by a header
// is honoured for requests through a trusted proxy, not for the same
// header sent by a client; one that grants less applies to anyone; from:
// anyone opts out (and warns).
func TestOverridesNeedTrustedProxy(t *testing.T) {
	src := func(trusted string) string {
		return trusted + `
rules:
  - name: api
    limits:
      - name: per-user
        key: header:X-User
        algorithm: fixed_window
        rate: 2/h
        overrides:
          - {header: X-Plan, equals: vip, scale: 5}
          - {header: X-Plan, equals: free, scale: 0.5}
          - {header: X-Partner, equals: acme, scale: 2, from: anyone}
`
	}
	for _, tc := range []struct {
		trusted string
		vip     int // admitted of 12 with X-Plan: vip
	}{
		{"trusted_proxies: [127.0.0.0/8]", 10},
		{"trusted_proxies: [10.0.0.0/8]", 2},
		{"", 2},
	} {
		p, err := policy.Parse("trust.yaml", []byte(src(tc.trusted)), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ProtectedHeaders(); len(got) != 1 || got[0] != "X-Plan" {
			t.Fatalf("protected headers %q, want [X-Plan]", got)
		}
		if len(p.Warnings) == 0 || !strings.Contains(strings.Join(p.Warnings, "\n"), "anyone who sends X-Partner: acme gets 2 times the limit") {
			t.Fatalf("%q: warnings %q", tc.trusted, p.Warnings)
		}
		if tc.trusted == "" && !strings.Contains(strings.Join(p.Warnings, "\n"), "X-Plan: vip can never apply") {
			t.Fatalf("no warning that the override can never apply: %q", p.Warnings)
		}
		mem, _ := memstore.New(memstore.Config{})
		defer mem.Close()
		srv := serveOn(t, mem, p)
		if ok, _ := count(t, 12, "GET", srv.URL+"/", "X-User", "v", "X-Plan", "vip"); ok != tc.vip {
			t.Errorf("%q: vip admitted %d of 12, want %d", tc.trusted, ok, tc.vip)
		}
		if ok, _ := count(t, 3, "GET", srv.URL+"/", "X-User", "f", "X-Plan", "free"); ok != 1 {
			t.Errorf("%q: free admitted %d of 3, want 1 (half of 2, from anyone)", tc.trusted, ok)
		}
		if ok, _ := count(t, 6, "GET", srv.URL+"/", "X-User", "p", "X-Partner", "acme"); ok != 4 {
			t.Errorf("%q: partner admitted %d of 6, want 4 (from: anyone)", tc.trusted, ok)
		}
	}
}

// TestOnMissing: what a limit does with a request that lacks a part of its
// key: skip it (the default), refuse it (400, nothing charged), or count it
// under another key.
func TestOnMissing(t *testing.T) {
	p, err := policy.Parse("missing.yaml", []byte(`
rules:
  - name: skip
    match: {path: /skip}
    limits: [{name: s, key: header:X-User, algorithm: fixed_window, rate: 2/h}]
  - name: refuse
    match: {path: /refuse}
    limits: [{name: r, key: header:X-User, algorithm: fixed_window, rate: 2/h, on_missing: refuse}]
  - name: shared
    match: {path: /shared}
    limits: [{name: g, key: header:X-User, algorithm: fixed_window, rate: 2/h, on_missing: global}]
  - name: other
    match: {path: /other}
    limits: [{name: o, key: [header:X-User, header:X-Team], algorithm: fixed_window, rate: 2/h, on_missing: [header:X-Team]}]
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := memstore.New(memstore.Config{})
	defer mem.Close()
	srv := serveOn(t, mem, p)
	for _, tc := range []struct {
		path    string
		headers []string
		ok      int // of 4
		status  int // of the refusals
	}{
		{"/skip", nil, 4, 0},
		{"/skip", []string{"X-User", "u"}, 2, 429},
		{"/refuse", nil, 0, 400},
		{"/refuse", []string{"X-User", "u"}, 2, 429},
		{"/shared", nil, 2, 429}, // every anonymous request shares one counter
		{"/shared", []string{"X-User", "anon"}, 2, 429},
		{"/other", []string{"X-Team", "t"}, 2, 429},
		{"/other", nil, 0, 400}, // the on_missing key lacks a part too
	} {
		ok, status := 0, 0
		for range 4 {
			resp, _ := do(t, "GET", srv.URL+tc.path, tc.headers...)
			if resp.StatusCode == 200 {
				ok++
			} else {
				status = resp.StatusCode
			}
		}
		if ok != tc.ok || status != tc.status {
			t.Errorf("%s %q: %d of 4 admitted, refusals %d; want %d and %d", tc.path, tc.headers, ok, status, tc.ok, tc.status)
		}
	}
}
