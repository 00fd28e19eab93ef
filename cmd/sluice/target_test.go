package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is what the upstream received of one request, by its X-Test-Id.
type seen struct{ target, host string }

// recorder is an upstream that records the request target and
// X-Forwarded-Host of every request it receives.
type recorder struct {
	mu   sync.Mutex
	byID map[string]seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.byID[r.Header.Get("X-Test-Id")] = seen{r.RequestURI, r.Header.Get("X-Forwarded-Host")}
	rec.mu.Unlock()
}

func (rec *recorder) get(id string) (seen, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	s, ok := rec.byID[id]
	return s, ok
}

// rawRequest sends a request whose target and Host header are exactly the
// bytes given, as a hostile client would (Go's client would clean some),
// and reads the answer.
func rawRequest(t *testing.T, addr, method, target, host, id string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nX-Test-Id: %s\r\nConnection: close\r\n\r\n", method, target, host, id)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, target, host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// remaining reads a limit's remaining quota from a RateLimit field, -1 if
// the field does not list the limit.
func remaining(field, limit string) int {
	m := regexp.MustCompile(`"` + limit + `";r=(\d+)`).FindStringSubmatch(field)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestGatewayNormalizesTargets sends the gateway requests spelled to get
// around an /api/ rule and a beta.example.com rule (escapes, dot segments,
// repeated slashes, path parameters, encoded slashes, path and host case,
// trailing dots, ports, absolute-form targets) and checks, for each, that it was
// either refused with a 4xx and never reached the upstream, or counted by
// the rule (its limit's remaining quota went down by exactly one) and the
// upstream received the very path and host the rule matched.
func TestGatewayNormalizesTargets(t *testing.T) {
	rec := &recorder{byID: map[string]seen{}}
	up := httptest.NewServer(rec)
	defer up.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: api, key: global, algorithm: fixed_window, limit: 1000, window: 1h}
  - name: beta
    match: {host: beta.example.com}
    limits:
      - {name: beta, key: host, algorithm: fixed_window, limit: 1000, window: 1h}
`)
	p := start(t, nil, "--upstream", up.URL, "--policy", policy)
	const refused = ""
	cases := []struct {
		method, target, host string
		path, fwdHost        string // what the upstream receives; path refused: a 4xx
		api, beta            bool   // which rules count it
	}{
		{"GET", "/api/x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/%61pi/x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/%41%50%49/../%61%70%69/%78", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/x/../api/x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/x/%2e%2e/api/x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/../../api/x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "//api//x", "a.example", "/api/x", "a.example", true, false},
		{"GET", "/./api/./x/.", "a.example", "/api/x/", "a.example", true, false},
		{"GET", "/api/x/..", "a.example", "/api/", "a.example", true, false},
		{"GET", "/api/caf%c3%a9?q=%2F..", "a.example", "/api/caf%C3%A9?q=%2F..", "a.example", true, false},
		{"GET", "/api/{x}", "a.example", "/api/%7Bx%7D", "a.example", true, false},
		{"GET", "/api", "a.example", "/api", "a.example", true, false},     // ServeMux would redirect it: counted all the same
		{"GET", "/API/x", "a.example", "/API/x", "a.example", true, false}, // matched whatever its case, forwarded as sent
		{"GET", "/%41pi/X", "a.example", "/Api/X", "a.example", true, false},
		{"GET", "http://a.example/%61pi/x", "other.example", "/api/x", "a.example", true, false},
		{"GET", "/api%2Fx", "a.example", refused, "", false, false},
		{"GET", "/api%2fx/y", "a.example", refused, "", false, false},
		{"GET", "/x%2F..%2Fapi/x", "a.example", refused, "", false, false},
		{"GET", "/api%5Cx", "a.example", refused, "", false, false},
		{"GET", `/api\x`, "a.example", refused, "", false, false},
		{"GET", "/api;x/x", "a.example", refused, "", false, false},
		{"GET", "/api/x;jsessionid=1", "a.example", refused, "", false, false},
		{"GET", "/api/%00", "a.example", refused, "", false, false},
		{"GET", "/api/%0d%0a", "a.example", refused, "", false, false},
		{"GET", "/api/%zz", "a.example", refused, "", false, false},
		{"GET", "/", "beta.example.com", "/", "beta.example.com", false, true},
		{"GET", "/", "BETA.example.COM", "/", "beta.example.com", false, true},
		{"GET", "/", "beta.example.com.", "/", "beta.example.com", false, true},
		{"GET", "/", "Beta.Example.Com.:8080", "/", "beta.example.com:8080", false, true},
		{"GET", "//api/x", "BETA.example.com.", "/api/x", "beta.example.com", true, true},
		{"GET", "http://BETA.example.com./x", "a.example", "/x", "beta.example.com", false, true},
		{"GET", "/", "beta..example.com", refused, "", false, false},
		{"GET", "/", ".beta.example.com", refused, "", false, false},
		{"GET", "/", "beta.example.com:http", refused, "", false, false},
	}
	counted := map[string]int{}
	for i, tc := range cases {
		id := strconv.Itoa(i)
		resp := rawRequest(t, p.addrs["gateway"], tc.method, tc.target, tc.host, id)
		got, reached := rec.get(id)
		desc := fmt.Sprintf("%s %s (Host %s)", tc.method, tc.target, tc.host)
		if tc.path == refused {
			if resp.StatusCode < 400 || resp.StatusCode > 499 || reached {
				t.Errorf("%s: %d, reached the upstream as %+v (%v); want a 4xx that never reaches it", desc, resp.StatusCode, got, reached)
			}
			continue
		}
		if resp.StatusCode != 200 || got.target != tc.path || got.host != tc.fwdHost {
			t.Errorf("%s: %d, upstream received %+v (%v); want 200 and {%s %s}", desc, resp.StatusCode, got, reached, tc.path, tc.fwdHost)
		}
		for limit, want := range map[string]bool{"api": tc.api, "beta": tc.beta} {
			r := remaining(resp.Header.Get("RateLimit"), limit)
			if want {
				counted[limit]++
			}
			switch {
			case want && r != 1000-counted[limit]:
				t.Errorf("%s: %s remaining %d, want %d: not counted once", desc, limit, r, 1000-counted[limit])
			case !want && r != -1:
				t.Errorf("%s: counted by %s (RateLimit %q)", desc, limit, resp.Header.Get("RateLimit"))
			}
		}
	}
	// net/http answers OPTIONS * itself (200, no body): never forwarded.
	if resp := rawRequest(t, p.addrs["gateway"], "OPTIONS", "*", "a.example", "options"); resp.StatusCode != 200 {
		t.Errorf("OPTIONS *: %d", resp.StatusCode)
	}
	if got, reached := rec.get("options"); reached {
		t.Errorf("OPTIONS * reached the upstream as %+v", got)
	}
	// Problem documents for the refusals, and nothing let through
	// uncounted: the upstream received exactly the requests the rules
	// counted.
	resp := rawRequest(t, p.addrs["gateway"], "GET", "/api%2Fx", "a.example", "last")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 400 || ct != "application/problem+json" {
		t.Errorf("refusal: %d %s, want 400 application/problem+json", resp.StatusCode, ct)
	}
	if n := len(rec.byID); n != counted["api"]+counted["beta"]-1 { // one request counted by both
		t.Errorf("the upstream received %d requests; the rules counted %d and %d (one by both)", n, counted["api"], counted["beta"])
	}
}

// TestKeysMasked: a hostile client sends a recognisable token as its key
// until it is refused, through the gateway and the decision API. The
// refusal logs and /status.json show masks, never the token; with
// --show-keys they show it.
func TestKeysMasked(t *testing.T) {
	const token = "tok_live_Zq7SECRETvalue"
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: api
    match: {path: /}
    limits:
      - {name: per-token, key: header:X-Api-Token, algorithm: fixed_window, limit: 1, window: 1h}
`)
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprintf("show-keys=%v", show), func(t *testing.T) {
			args := []string{"--policy", policy}
			if show {
				args = append(args, "--show-keys")
			}
			p := start(t, nil, args...)
			for range 3 {
				get(t, p.url("gateway", "/"), "X-Api-Token", token)
				do(t, "POST", p.url("api", "/v1/check"), `{"request": {"path": "/", "headers": {"X-Api-Token": "`+token+`"}}}`)
			}
			p.waitLog("httplimit: refused requests", 10*time.Second)
			p.waitLog("decision API: refused requests", 10*time.Second)
			status := get(t, p.url("admin", "/status.json")).body
			if !strings.Contains(status, `"heavy_keys":[{`) {
				t.Fatalf("no heavy keys in /status.json: %s", status)
			}
			logs := p.logs()
			if show {
				if !strings.Contains(status, `"key":"header:X-Api-Token=`+token) || !strings.Contains(logs, token) {
					t.Errorf("--show-keys: the token is not shown:\n/status.json: %s\nlogs: %s", status, logs)
				}
				return
			}
			if strings.Contains(status, token) || strings.Contains(logs, token) {
				t.Errorf("the token is shown without --show-keys:\n/status.json: %s\nlogs: %s", status, logs)
			}
			if !strings.Contains(status, `"limit":"gateway per-token","key":"header:X-Api-Token=key#`) || !strings.Contains(logs, `"key":"header:X-Api-Token=key#`) {
				t.Errorf("no masked key beside its limit:\n/status.json: %s\nlogs: %s", status, logs)
			}
		})
	}
}

// TestGatewayNormalizesMethods sends the gateway a method spelled in
// other cases and POSTs that name another method in the headers some
// frameworks honour (Express's method-override, Symfony, Rack, OData),
// and checks that each was counted by the POST rule and that the upstream
// received the upper-case method and none of those headers: it can only
// serve the method the rule counted.
func TestGatewayNormalizesMethods(t *testing.T) {
	type got struct {
		method    string
		overrides []string
	}
	var mu sync.Mutex
	byID := map[string]got{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := got{method: r.Method}
		for k := range r.Header {
			if n := strings.ToLower(strings.ReplaceAll(k, "_", "-")); strings.Contains(n, "method") {
				g.overrides = append(g.overrides, k)
			}
		}
		mu.Lock()
		byID[r.Header.Get("X-Test-Id")] = g
		mu.Unlock()
	}))
	defer up.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: writes
    match: {methods: [POST, PURGE], path: /orders/}
    limits:
      - {name: writes, key: global, algorithm: fixed_window, limit: 1000, window: 1h}
`)
	p := start(t, nil, "--upstream", up.URL, "--policy", policy)
	cases := []struct{ method, header, want string }{
		{"POST", "", "POST"},
		{"post", "", "POST"},
		{"Post", "", "POST"},
		{"pOsT", "", "POST"},
		{"purge", "", "PURGE"},
		{"POST", "X-HTTP-Method-Override: DELETE", "POST"},
		{"POST", "x-http-method-override: GET", "POST"},
		{"POST", "X-HTTP-Method: PUT", "POST"},
		{"POST", "X-Method-Override: PATCH", "POST"},
		{"post", "X_HTTP_Method_Override: GET", "POST"},
	}
	for i, tc := range cases {
		id := strconv.Itoa(i)
		conn, err := net.Dial("tcp", p.addrs["gateway"])
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		extra := ""
		if tc.header != "" {
			extra = tc.header + "\r\n"
		}
		fmt.Fprintf(conn, "%s /orders/a HTTP/1.1\r\nHost: a.example\r\nX-Test-Id: %s\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n", tc.method, id, extra)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.header, err)
		}
		resp.Body.Close()
		conn.Close()
		mu.Lock()
		g, reached := byID[id]
		mu.Unlock()
		desc := tc.method + " with " + cmp.Or(tc.header, "no override")
		if resp.StatusCode != 200 || !reached || g.method != tc.want || len(g.overrides) > 0 {
			t.Errorf("%s: %d; the upstream received %+v (%v); want 200, %s and no override header", desc, resp.StatusCode, g, reached, tc.want)
		}
		if r := remaining(resp.Header.Get("RateLimit"), "writes"); r != 1000-(i+1) {
			t.Errorf("%s: writes remaining %d, want %d: not counted once by the rule", desc, r, 1000-(i+1))
		}
	}
}
