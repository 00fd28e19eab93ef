package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// relatePolicy throttles a client's reads (3 an hour) only while its
// writes use more than 80% of theirs, and counts the orders of every
// request through the checkout entry (2 an hour, all clients together):
// the checkout rule matched first, or said so by the trusted proxy
// 127.0.0.2 in X-Sluice-Entry.
const relatePolicy = `
trusted_proxies: [127.0.0.2/32]
entry_header: X-Sluice-Entry
rules:
  - name: writes
    match: {methods: [POST], path: /api/}
    limits:
      - {name: writes-ip, key: ip, algorithm: fixed_window, rate: 10/h}
  - name: reads
    match: {methods: [GET], path: /api/}
    limits:
      - {name: reads-ip, key: ip, algorithm: fixed_window, rate: 3/h, when: {limit: writes-ip, above: 0.8}}
  - name: checkout
    match: {path: /checkout/}
    limits:
      - {name: checkout-ip, key: ip, algorithm: fixed_window, rate: 100/h}
  - name: orders
    match: {path: /}
    limits:
      - {name: orders-from-checkout, key: global, algorithm: fixed_window, rate: 2/h, when: {entry: checkout}}
`

// proxyClient is an HTTP client whose connections come from 127.0.0.2,
// the policy's trusted proxy (the default client's come from 127.0.0.1).
var proxyClient = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
	LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}).DialContext}}

// entrySeen is a stand-in upstream that remembers the X-Sluice-Entry
// headers it received.
type entrySeen struct {
	mu   sync.Mutex
	seen []string
}

func (u *entrySeen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, r.Header.Values("X-Sluice-Entry")...)
}

// TestServeRelateAndChain runs relatePolicy through sluice serve on the
// memory store and on a Redis Cluster (where a client's writes key and its
// reads key lie in different slots), with real HTTP clients: reads are
// throttled only while writes are busy; orders are counted for requests
// through checkout, by the first rule matched or by the trusted proxy's
// header, which a client that is not the proxy cannot send (ignored, and
// removed before the upstream); the decision API decides the same.
func TestServeRelateAndChain(t *testing.T) {
	for _, st := range []string{"memory", "cluster"} {
		t.Run(st, func(t *testing.T) {
			up := &entrySeen{}
			upstream := httptest.NewServer(up)
			t.Cleanup(upstream.Close)
			path := filepath.Join(t.TempDir(), "policy.yaml")
			writeFile(t, path, relatePolicy)
			args := []string{"--policy", path, "--upstream", upstream.URL}
			if st == "cluster" {
				args = append(args, "--store", "redis", "--redis-mode", "cluster", "--redis-addrs", joinComma(redistest.Cluster(t).Options().Addrs),
					"--redis-prefix", redistest.Prefix(t), "--redis-timeout", "5s")
			}
			p := start(t, nil, args...)
			serveRelate(t, p)
			serveChain(t, p, up)
			apiRelateAndChain(t, p)
		})
	}
}

// serveRelate: reads from 127.0.0.1 pass unlimited while its writes are at
// 0 to 8 of 10, and reads-ip is in none of their RateLimit-Policy fields;
// after a ninth write, 3 reads pass and the fourth is refused. Another
// client's reads (through the proxy) are not limited meanwhile.
func serveRelate(t *testing.T, p *proc) {
	t.Helper()
	var lastRead time.Time
	for i := range 8 {
		r := get(t, p.url("gateway", "/api/items"))
		lastRead = time.Now()
		if r.status != 200 || strings.Contains(r.header.Get("RateLimit-Policy"), "reads-ip") {
			t.Fatalf("read %d while writes are idle: %d, RateLimit-Policy %q; want 200 without reads-ip", i+1, r.status, r.header.Get("RateLimit-Policy"))
		}
		if r := do(t, "POST", p.url("gateway", "/api/items"), "x"); r.status != 200 {
			t.Fatalf("write %d: %d", i+1, r.status)
		}
	}
	if r := do(t, "POST", p.url("gateway", "/api/items"), "x"); r.status != 200 {
		t.Fatalf("write 9: %d", r.status)
	}
	// The gateway reuses a peek at writes-ip for 100ms from when it was
	// sent (decide.Config.RelateFor), before the last read was answered.
	time.Sleep(time.Until(lastRead.Add(100 * time.Millisecond)))
	var got []int
	for range 4 {
		r := get(t, p.url("gateway", "/api/items"))
		got = append(got, r.status)
		if r.status == 200 && !strings.Contains(r.header.Get("RateLimit-Policy"), `"reads-ip";q=3`) {
			t.Errorf("read while writes are busy: RateLimit-Policy %q, want reads-ip", r.header.Get("RateLimit-Policy"))
		}
	}
	if want := []int{200, 200, 200, 429}; !equalStatuses(got, want) {
		t.Fatalf("reads while writes are at 9 of 10: %v, want %v", got, want)
	}
	for i := range 5 {
		if r := proxied(t, "GET", p.url("gateway", "/api/items"), "X-Forwarded-For", "192.0.2.5"); r.status != 200 {
			t.Fatalf("another client's read %d: %d, want 200 (its writes are idle)", i+1, r.status)
		}
	}
}

// serveChain: two orders through checkout pass, the third is refused;
// requests that matched another rule first are not counted, even when a
// client sends X-Sluice-Entry: checkout (ignored, and never forwarded), nor
// can a client escape the count by naming another entry; the trusted proxy
// naming checkout is counted.
func serveChain(t *testing.T, p *proc, up *entrySeen) {
	t.Helper()
	var got []int
	for range 3 {
		got = append(got, get(t, p.url("gateway", "/checkout/pay")).status)
	}
	if want := []int{200, 200, 429}; !equalStatuses(got, want) {
		t.Fatalf("orders through checkout: %v, want %v", got, want)
	}
	for i := range 3 {
		if r := get(t, p.url("gateway", "/browse/x")); r.status != 200 {
			t.Fatalf("browse %d: %d, want 200 (not through checkout)", i+1, r.status)
		}
	}
	if r := get(t, p.url("gateway", "/browse/x"), "X-Sluice-Entry", "checkout"); r.status != 200 {
		t.Fatalf("a client saying it came through checkout: %d, want 200 (header ignored)", r.status)
	}
	if r := get(t, p.url("gateway", "/checkout/pay"), "X-Sluice-Entry", "browse"); r.status != 429 {
		t.Fatalf("a client through checkout saying otherwise: %d, want 429 (still counted)", r.status)
	}
	if r := proxied(t, "GET", p.url("gateway", "/browse/x"), "X-Forwarded-For", "192.0.2.6", "X-Sluice-Entry", "checkout"); r.status != 429 {
		t.Fatalf("the trusted proxy naming checkout: %d, want 429 (counted)", r.status)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.seen) != 0 {
		t.Fatalf("the upstream received X-Sluice-Entry %q from a client", up.seen)
	}
}

// apiRelateAndChain: /v1/check decides as the gateway does. A read of a
// client whose writes are idle is allowed with reads-ip idle; a request
// said to come through checkout by the trusted proxy is refused (orders
// spent), the same said by another address is allowed.
func apiRelateAndChain(t *testing.T, p *proc) {
	t.Helper()
	check := func(body string) (allowed bool, idle []string) {
		t.Helper()
		r := do(t, "POST", p.url("api", "/v1/check"), body)
		var resp struct {
			Allowed bool     `json:"allowed"`
			Idle    []string `json:"idle"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &resp) != nil {
			t.Fatalf("/v1/check %s: %d %s", body, r.status, r.body)
		}
		return resp.Allowed, resp.Idle
	}
	if ok, idle := check(`{"request": {"method": "GET", "path": "/api/items", "ip": "198.51.100.7"}}`); !ok || len(idle) != 1 || idle[0] != "reads-ip" {
		t.Fatalf("a read whose writes are idle: allowed %t, idle %q; want allowed, reads-ip idle", ok, idle)
	}
	if ok, _ := check(`{"request": {"method": "GET", "path": "/browse/x", "ip": "127.0.0.2", "headers": {"X-Sluice-Entry": "checkout"}}}`); ok {
		t.Fatal("through checkout by the trusted proxy's header: allowed, want refused")
	}
	if ok, _ := check(`{"request": {"method": "GET", "path": "/browse/x", "ip": "203.0.113.9", "headers": {"X-Sluice-Entry": "checkout"}}}`); !ok {
		t.Fatal("the entry header from another address: refused, want it ignored")
	}
}

// proxied sends a request from the trusted proxy's address.
func proxied(t *testing.T, method, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := proxyClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}
