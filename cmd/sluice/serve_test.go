package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServeDefaults runs `sluice serve` as a newcomer does (only the ports
// changed): the sample policy admits five requests at once per client and
// refuses the next with 429 and the RateLimit fields.
func TestServeDefaults(t *testing.T) {
	p := start(t, nil)
	var codes []int
	for range 7 {
		codes = append(codes, get(t, p.url("gateway", "/")).status)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429 429]" {
		t.Fatalf("statuses %v, want five 200 then 429s", codes)
	}
	r := get(t, p.url("gateway", "/"))
	if r.status != 429 || r.header.Get("Retry-After") != "1" || r.header.Get("RateLimit-Policy") != `"per-ip";q=5;w=5` ||
		!strings.HasPrefix(r.header.Get("RateLimit"), `"per-ip";r=0;`) || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("refusal: %d %v %s", r.status, r.header, r.body)
	}
	if r := get(t, p.url("admin", "/healthz")); r.status != 200 {
		t.Errorf("/healthz: %d %s", r.status, r.body)
	}
	if r := get(t, p.url("admin", "/readyz")); r.status != 200 {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
	if got := metric(t, p, `sluice_decisions_total{degraded="false",limit="per-ip",outcome="refused",source="gateway"}`); got != 3 {
		t.Errorf("refused decisions metric = %v, want 3", got)
	}
	if got := metric(t, p, `sluice_decisions_total{degraded="false",limit="per-ip",outcome="admitted",source="gateway"}`); got != 5 {
		t.Errorf("admitted decisions metric = %v, want 5", got)
	}
	page := get(t, p.url("admin", "/status"))
	if page.status != 200 || !strings.Contains(page.body, "<title>sluice status</title>") || strings.Contains(page.body, "https://") {
		t.Errorf("status page: %d, self-contained: %v", page.status, !strings.Contains(page.body, "https://"))
	}
	var st struct {
		Rules []struct {
			Name   string
			Limits []struct{ Name, Key, Algorithm string }
		}
		Counts []struct {
			Source, Limit string
			Counts        map[string]int64
		}
		HeavyKeys []struct {
			Limit, Key string
			Count      int64
		} `json:"heavy_keys"`
	}
	if err := json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rules) != 2 || st.Rules[0].Name != "everything" || st.Rules[0].Limits[0].Algorithm != "token_bucket(1/s, burst 5)" {
		t.Errorf("status rules: %+v", st.Rules)
	}
	if len(st.Counts) != 1 || st.Counts[0].Counts["refused"] != 3 || st.Counts[0].Counts["admitted"] != 5 {
		t.Errorf("status counts: %+v", st.Counts)
	}
	// The key is shown by the name of its part, its value (the client's
	// address) masked: see TestKeysMasked.
	if len(st.HeavyKeys) != 1 || st.HeavyKeys[0].Count != 3 || !strings.HasPrefix(st.HeavyKeys[0].Key, "ip=key#") || strings.Contains(st.HeavyKeys[0].Key, "127.0.0.1") {
		t.Errorf("heavy keys: %+v", st.HeavyKeys)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// TestGateway puts sluice in front of a real upstream: X-Forwarded-For is
// appended to, streams arrive as they are written, upgrades pass through,
// and an unreachable upstream is a 502.
func TestGateway(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			fmt.Fprintf(w, "xff=%s host=%s proto=%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"))
		case "/stream":
			fmt.Fprint(w, "first\n")
			w.(http.Flusher).Flush()
			<-release // the client must see "first" before this returns
			fmt.Fprint(w, "second\n")
		case "/upgrade":
			if r.Header.Get("Upgrade") != "echo" {
				http.Error(w, "want Upgrade: echo", 400)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			rw.WriteString("echo: " + line)
			rw.Flush()
		}
	}))
	defer up.Close()
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // before up.Close, which waits for the handler
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: all
    limits:
      - {name: global, key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}
`)
	// A short read timeout: an upgraded connection must outlive it.
	p := start(t, nil, "--upstream", up.URL, "--policy", policy, "--read-timeout", "500ms")

	r := get(t, p.url("gateway", "/echo"), "X-Forwarded-For", "198.51.100.7")
	if r.status != 200 || !strings.HasPrefix(r.body, "xff=127.0.0.1 host="+p.addrs["gateway"]+" proto=http") { // the client's own list is dropped: no trusted proxies
		t.Errorf("echo: %d %q", r.status, r.body)
	}
	if r.header.Get("RateLimit") == "" {
		t.Errorf("no RateLimit field on a proxied response")
	}

	resp, err := client.Get(p.url("gateway", "/stream"))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("stream: first line %q, %v", first, err)
	}
	releaseOnce.Do(func() { close(release) }) // the upstream was still writing: it was streamed
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if string(rest) != "second\n" {
		t.Errorf("stream: rest %q", rest)
	}

	conn, err := net.Dial("tcp", p.addrs["gateway"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	cr := bufio.NewReader(conn)
	status, _ := cr.ReadString('\n')
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("upgrade: %q", status)
	}
	for {
		l, err := cr.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	time.Sleep(time.Second) // past the read timeout of the request that upgraded
	fmt.Fprintf(conn, "hello over the upgraded connection\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, _ := cr.ReadString('\n'); l != "echo: hello over the upgraded connection\n" {
		t.Errorf("upgraded connection echoed %q", l)
	}

	up.Close()
	if r := get(t, p.url("gateway", "/echo")); r.status != 502 {
		t.Errorf("upstream down: %d %s, want 502", r.status, r.body)
	}
}

// TestGracefulShutdown sends SIGTERM while a slow request is in flight:
// the request finishes, new connections are refused, sluice exits 0.
func TestGracefulShutdown(t *testing.T) {
	p := start(t, nil, "--shutdown-timeout", "10s")
	type result struct {
		r   response
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Get(p.url("gateway", "/slow?ms=3000"))
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{response{resp.StatusCode, resp.Header, string(b)}, err}
	}()
	time.Sleep(300 * time.Millisecond) // the request is in flight
	p.signal(syscall.SIGTERM)
	p.waitLog("shutting down", 5*time.Second)
	time.Sleep(100 * time.Millisecond)
	if _, err := net.DialTimeout("tcp", p.addrs["gateway"], time.Second); err == nil {
		t.Errorf("the gateway still accepts connections while draining")
	}
	// The probes see the drain: the admin listener stays open until the
	// others are done, and /readyz says 503.
	if r := get(t, p.url("admin", "/readyz")); r.status != 503 {
		t.Errorf("/readyz while draining: %d %q, want 503", r.status, r.body)
	}
	res := <-done
	if res.err != nil || res.r.status != 200 || res.r.body != "slept 3000 ms\n" {
		t.Fatalf("in-flight request: %+v", res)
	}
	if code := p.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestShutdownDeadline: a request longer than --shutdown-timeout is cut,
// and sluice still exits within the bound, with 0: a cut request is the
// drain's normal end, not a failure.
func TestShutdownDeadline(t *testing.T) {
	p := start(t, nil, "--shutdown-timeout", "500ms")
	go client.Get(p.url("gateway", "/slow?ms=20000"))
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	p.signal(syscall.SIGINT)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Errorf("exit code %d after cutting a request, want 0", code)
	}
	if !strings.Contains(p.logs(), "in-flight requests cut") {
		t.Errorf("the cut was not logged")
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("shutdown took %v with a 500ms bound", took)
	}
}

// TestReload edits the policy file the ways operators and tools do, and
// sends SIGHUP; a broken file keeps the old policy and is counted.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	policyN := func(n int) string {
		return fmt.Sprintf(`
rules:
  - name: all
    limits:
      - {name: cap, key: global, algorithm: sliding_log, limit: %d, window: 1h}
`, n)
	}
	admitted := func(p *proc, tries int) int {
		n := 0
		for range tries {
			if get(t, p.url("gateway", "/")).status == 200 {
				n++
			}
		}
		return n
	}
	writeFile(t, path, policyN(2))
	p := start(t, nil, "--policy", path)
	if n := admitted(p, 4); n != 2 {
		t.Fatalf("limit 2 admitted %d", n)
	}

	// An editor's save: write a new file, rename it over the old one.
	writeFile(t, path+".tmp", policyN(5))
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the renamed file to apply", func() bool { return metric(t, p, `sluice_config_reloads_total{config="policy",result="ok"}`) >= 2 })
	if n := admitted(p, 6); n != 5 { // a limit whose parameters changed starts afresh
		t.Errorf("after raising the limit to 5: %d of 6 admitted", n)
	}

	// A broken file: the old policy stays and the failure is counted.
	writeFile(t, path, "rules:\n  - name: all\n    limits: []\n")
	waitFor(t, "the broken file to be rejected", func() bool {
		return metric(t, p, `sluice_config_reloads_total{config="policy",result="error"}`) >= 1
	})
	if r := get(t, p.url("gateway", "/")); r.header.Get("RateLimit-Policy") != `"cap";q=5;w=3600` {
		t.Errorf("after a broken file the policy is %q, want the previous one", r.header.Get("RateLimit-Policy"))
	}
	var st struct {
		PolicyError string `json:"policy_error"`
	}
	json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st)
	if !strings.Contains(st.PolicyError, `policy.yaml:3: rule "all": limits: `) {
		t.Errorf("status page policy_error = %q", st.PolicyError)
	}

	// A Kubernetes ConfigMap: the file is a symlink through ..data, which
	// is swapped atomically to a new directory.
	k8s := filepath.Join(dir, "k8s")
	os.MkdirAll(filepath.Join(k8s, "..v1"), 0o755)
	writeFile(t, filepath.Join(k8s, "..v1", "policy.yaml"), policyN(7))
	os.Symlink("..v1", filepath.Join(k8s, "..data"))
	os.Symlink(filepath.Join("..data", "policy.yaml"), filepath.Join(k8s, "policy.yaml"))
	q := start(t, nil, "--policy", filepath.Join(k8s, "policy.yaml"))
	if r := get(t, q.url("gateway", "/")); r.header.Get("RateLimit-Policy") != `"cap";q=7;w=3600` {
		t.Fatalf("configmap policy: %q", r.header.Get("RateLimit-Policy"))
	}
	os.MkdirAll(filepath.Join(k8s, "..v2"), 0o755)
	writeFile(t, filepath.Join(k8s, "..v2", "policy.yaml"), policyN(9))
	os.Symlink("..v2", filepath.Join(k8s, "..data_tmp"))
	if err := os.Rename(filepath.Join(k8s, "..data_tmp"), filepath.Join(k8s, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(k8s, "..v1"))
	waitFor(t, "the ConfigMap swap to apply", func() bool {
		return get(t, q.url("gateway", "/")).header.Get("RateLimit-Policy") == `"cap";q=9;w=3600`
	})

	// SIGHUP, with watching off.
	hupPath := filepath.Join(dir, "hup.yaml")
	writeFile(t, hupPath, policyN(3))
	h := start(t, nil, "--policy", hupPath, "--watch=false")
	writeFile(t, hupPath, policyN(4))
	time.Sleep(500 * time.Millisecond) // longer than the watcher's debounce: it must not reload
	if got := get(t, h.url("gateway", "/")).header.Get("RateLimit-Policy"); got != `"cap";q=3;w=3600` {
		t.Fatalf("reloaded without SIGHUP while --watch=false: %q", got)
	}
	h.signal(syscall.SIGHUP)
	waitFor(t, "SIGHUP to reload", func() bool {
		return get(t, h.url("gateway", "/")).header.Get("RateLimit-Policy") == `"cap";q=4;w=3600`
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDecisionAPI drives POST /v1/check and /v1/release in both modes.
func TestDecisionAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, `
rules:
  - name: orders
    match: {methods: [POST], path: "/orders/{id}"}
    limits:
      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 2, window: 1h}
  - name: trial
    match: {path: /}
    limits:
      - {name: trial-ip, key: ip, algorithm: fixed_window, limit: 1, window: 1h}
    action: {refuse: shadow}
  - name: reports
    match: {path: /reports}
    limits:
      - {name: reports-running, key: global, algorithm: concurrency, limit: 1}
    action: {status: 503}
`)
	p := start(t, nil, "--policy", path)
	type decision struct {
		Name      string
		Key       string
		Shadow    bool
		Allowed   bool
		Remaining int64
		Lease     uint64
	}
	type answer struct {
		Allowed      bool
		Status       int
		Limit        string
		RetryAfterMs int64 `json:"retry_after_ms"`
		Decisions    []decision
		Headers      map[string]string
		Detail       string
	}
	check := func(body string) (int, answer) {
		t.Helper()
		r := do(t, "POST", p.url("api", "/v1/check"), body, "Content-Type", "application/json")
		var a answer
		if err := json.Unmarshal([]byte(r.body), &a); err != nil {
			t.Fatalf("%s: %v", r.body, err)
		}
		return r.status, a
	}
	order := `{"request": {"method": "POST", "path": "/orders/7", "ip": "203.0.113.5", "headers": {"X-User": "alice"}}}`
	for i, want := range []bool{true, true, false} {
		code, a := check(order)
		if code != 200 || a.Allowed != want {
			t.Fatalf("order %d: %d %+v", i, code, a)
		}
		if i == 0 && (len(a.Decisions) != 2 || a.Decisions[1].Name != "trial-ip" || !a.Decisions[1].Shadow || a.Headers["RateLimit-Policy"] != `"per-user";q=2;w=3600`) {
			t.Errorf("first order: %+v", a)
		}
		if i == 2 && (a.Status != 429 || a.Limit != "per-user" || a.RetryAfterMs <= 0 || a.Headers["Retry-After"] == "") {
			t.Errorf("refused order: %+v", a)
		}
	}
	if _, a := check(`{"request": {"method": "POST", "path": "/orders/7", "ip": "203.0.113.8", "headers": {"X-User": "bob"}}, "hits": 0}`); !a.Allowed || a.Decisions[0].Remaining != 2 {
		t.Errorf("a peek (hits 0) for bob: %+v", a)
	}
	if _, a := check(`{"rule": "trial", "request": {"path": "/orders/7", "method": "POST", "ip": "203.0.113.6", "headers": {"X-User": "carol"}}}`); len(a.Decisions) != 1 || a.Decisions[0].Name != "trial-ip" {
		t.Errorf("rule filter: %+v", a)
	}

	explicit := `{"checks": [{"name": "user", "key": "u:1", "limit": {"algorithm": "token_bucket", "rate": "1/h", "burst": 1}}]}`
	if _, a := check(explicit); !a.Allowed {
		t.Errorf("explicit first: %+v", a)
	}
	if _, a := check(explicit); a.Allowed || a.Status != 429 || a.Limit != "user" {
		t.Errorf("explicit second: %+v", a)
	}

	_, a := check(`{"request": {"path": "/reports", "ip": "203.0.113.9"}}`)
	if !a.Allowed || a.Decisions[0].Lease == 0 {
		t.Fatalf("first report: %+v", a)
	}
	if _, b := check(`{"request": {"path": "/reports", "ip": "203.0.113.9"}}`); b.Allowed || b.Status != 503 {
		t.Errorf("second report while the first runs: %+v", b)
	}
	rel := fmt.Sprintf(`{"name": "reports-running", "key": %q, "lease": %d}`, a.Decisions[0].Key, a.Decisions[0].Lease)
	if r := do(t, "POST", p.url("api", "/v1/release"), rel); r.status != 204 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	if _, b := check(`{"request": {"path": "/reports", "ip": "203.0.113.9"}}`); !b.Allowed {
		t.Errorf("a report after the release: %+v", b)
	}

	// The explicit example of docs/api.md works as written.
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(doc), "curl -s -X POST http://127.0.0.1:8083/v1/check -d '{\n  \"checks\"")
	example, _, _ = strings.Cut(example, "'")
	code, a := check(`{"checks"` + example)
	if code != 200 || len(a.Decisions) != 2 || !a.Allowed || a.Headers["RateLimit-Policy"] != `"per-user";q=20;w=2, "per-tenant";q=1000;w=60` {
		t.Errorf("docs/api.md's explicit example: %d %+v", code, a)
	}

	for body, want := range map[string]string{
		`{"checks": [{"key": "k", "limit": {"algorithm": "gcra", "rat": "1/s"}}]}`:             `checks[0].limit:1: unknown field "rat"`,
		`{"checks": [{"key": "", "limit": {"algorithm": "gcra", "rate": "1/s"}}]}`:             `checks[0].key: must be 1 to 512 bytes`,
		`{"checks": [{"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}, "hits": 5}]}`: `checks[0].hits: must be between 0 and the limit's capacity 1 (got 5)`,
		`{"request": {"path": "/"}, "checks": [{"key": "k"}]}`:                                 `not both`,
		`{}`: `give request`,
		`{"request": {"path": "/", "ip": "192.0.2.1"}, "rule": "nope"}`: `rule: "nope" is not a rule`,
		`{"request": {"path": "/", "ip": "not-an-ip"}}`:                 `request.ip: "not-an-ip" is not an IP address`,
		`{"request": {"path": "/"}}`:                                    `request.ip: missing, and a limit keyed by ip applies`,
		`{"requets": {}}`:                                               `unknown field "requets"`,
		`{"request": {"path": "/"}} {}`:                                 `more than one JSON value`,
		`{"checks": [` + strings.Repeat(`{"key": "k", "limit": {"algorithm": "gcra", "rate": "1/s"}},`, 40) + `{}]}`: `checks: 41, more than 32`,
		`"` + strings.Repeat("x", 70<<10) + `"`: `larger than 65536 bytes`,
	} {
		r := do(t, "POST", p.url("api", "/v1/check"), body)
		var problem struct{ Detail string }
		json.Unmarshal([]byte(r.body), &problem)
		if r.status != 400 || !strings.Contains(problem.Detail, want) {
			t.Errorf("bad request %.60s: %d %s, want 400 containing %q", body, r.status, r.body, want)
		}
	}
	if r := get(t, p.url("api", "/v1/check")); r.status != 405 {
		t.Errorf("GET /v1/check: %d", r.status)
	}
}

// TestCheckCommand runs `sluice check` on valid and invalid files.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "rules:\n  - name: a\n    limits:\n      - {name: g, key: global, algorithm: gcra, rate: 5/s}\n")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "rules:\n  - name: a\n    limits:\n      - {name: g, key: global, algorithm: gcra, rate: 5/s, brust: 2}\n")
	server := filepath.Join(dir, "server.yaml")
	writeFile(t, server, "gateway: ':8080'\nstore:\n  type: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n")
	warned := filepath.Join(dir, "warned.yaml")
	writeFile(t, warned, "rules:\n  - name: a\n    limits:\n      - name: g\n        key: global\n        algorithm: gcra\n        rate: 5/s\n        overrides: [{header: X-Internal-Caller, equals: billing, unlimited: true}]\n")
	shaped := filepath.Join(dir, "shaped.yaml")
	writeFile(t, shaped, "rules:\n  - name: a\n    limits:\n      - {name: s, key: ip, algorithm: leaky_bucket, rate: 10/s, queue: 15}\n")
	badServer := filepath.Join(dir, "server-bad.yaml")
	writeFile(t, badServer, "gateway: ':8080'\nstore:\n  type: rediss\n")
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"check", good}, 0, "ok      " + good + ": policy, 1 rules, 1 limits"},
		{[]string{"check", bad}, 1, bad + `:4: rule "a": limit "g": unknown field "brust"`},
		{[]string{"check", good, bad}, 1, "INVALID " + bad},
		{[]string{"check", shaped}, 1, "the last queued request would wait 1500ms (queue 15 at 10/s)"},
		{[]string{"check", "--max-delay", "2s", shaped}, 0, "ok      " + shaped},
		{[]string{"check", warned}, 0, "warning: " + warned + `:8: rule "a": limit "g": overrides: X-Internal-Caller: billing can never apply`},
		{[]string{"check", server}, 0, "server config"},
		{[]string{"check", badServer}, 1, `store.type: "rediss": want memory or redis`},
		{[]string{"check", "--kind", "policy", server}, 1, "INVALID"},
		{[]string{"check", filepath.Join(dir, "missing.yaml")}, 1, "no such file"},
		{[]string{"check"}, 2, ""},
		{[]string{"check", "--kind", "toml", good}, 2, ""},
		{[]string{"version"}, 0, "sluice "},
		{[]string{"frobnicate"}, 2, ""},
		{[]string{"serve", "--store", "nope"}, 1, ""},
		{[]string{"serve", "--watch", "maybe"}, 2, ""},
		{[]string{"serve", "--help"}, 0, ""},
	}
	for _, c := range cases {
		cmd := execSluice(c.args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(string(out), c.out) {
			t.Errorf("sluice %s: exit %d, output:\n%s\nwant exit %d and %q", strings.Join(c.args, " "), code, out, c.code, c.out)
		}
	}
}

// TestConfigPrecedence: flags override SLUICE_* variables, which override
// the config file.
func TestConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, "gateway: 127.0.0.1:0\napi: ''\ngrpc: 127.0.0.1:0\nadmin: ''\nmax_delay: 2s\nlog:\n  format: json\n")
	p := startArgs(t, []string{"SLUICE_CONFIG=" + path, "SLUICE_ADMIN=127.0.0.1:0", "SLUICE_GRPC="}, "serve", "--grpc", "127.0.0.1:0")
	if p.addrs["api"] != "" {
		t.Errorf("the file turned the api off, yet it listens on %s", p.addrs["api"])
	}
	if p.addrs["admin"] == "" {
		t.Errorf("SLUICE_ADMIN should override the file's admin: ''")
	}
	if p.addrs["grpc"] == "" {
		t.Errorf("--grpc should override SLUICE_GRPC=''")
	}
}

func execSluice(args ...string) *exec.Cmd {
	c := exec.Command(binary, args...)
	c.Env = cleanEnv()
	return c
}

// TestGatewayProtectedHeaders: a header an override honours only through
// trusted proxies grants nothing when a client sends it, and the gateway
// removes it before the upstream sees it; through a trusted proxy it is
// honoured and passed on. Likewise a client's X-Forwarded-For list and
// X-Real-IP: the upstream sees only the peer's address unless the peer is
// a trusted proxy (net/http's proxy drops Forwarded either way).
func TestGatewayProtectedHeaders(t *testing.T) {
	var seen sync.Map      // X-Internal-Caller values the upstream received
	var forwarded sync.Map // the forwarding headers it received
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("X-Internal-Caller"), true)
		forwarded.Store(fmt.Sprintf("xff=%q forwarded=%q real-ip=%q", r.Header.Values("X-Forwarded-For"), r.Header.Get("Forwarded"), r.Header.Get("X-Real-Ip")), true)
	}))
	defer up.Close()
	for _, tc := range []struct {
		trusted   string
		admitted  int // of 6
		upstream  string
		forwarded string
	}{
		{"trusted_proxies: [10.0.0.0/8]", 2, "", `xff=["127.0.0.1"] forwarded="" real-ip=""`},
		{"trusted_proxies: [127.0.0.0/8]", 6, "billing", `xff=["198.51.100.7, 127.0.0.1"] forwarded="" real-ip="198.51.100.7"`},
	} {
		seen.Clear()
		forwarded.Clear()
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		writeFile(t, policy, tc.trusted+`
rules:
  - name: all
    limits:
      - name: per-user
        key: header:X-User
        algorithm: fixed_window
        rate: 2/h
        overrides: [{header: X-Internal-Caller, equals: billing, unlimited: true}]
`)
		p := start(t, nil, "--upstream", up.URL, "--policy", policy)
		ok := 0
		for range 6 {
			if r := get(t, p.url("gateway", "/"), "X-User", "mallory", "X-Internal-Caller", "billing",
				"X-Forwarded-For", "198.51.100.7", "Forwarded", "for=198.51.100.7", "X-Real-IP", "198.51.100.7"); r.status == 200 {
				ok++
			}
		}
		_, got := seen.Load(tc.upstream)
		_, other := seen.Load("billing")
		if ok != tc.admitted || !got || (tc.upstream == "" && other) {
			t.Errorf("%s: %d of 6 admitted (want %d); upstream saw %q: %v, billing: %v", tc.trusted, ok, tc.admitted, tc.upstream, got, other)
		}
		var all []string
		forwarded.Range(func(k, _ any) bool { all = append(all, k.(string)); return true })
		if len(all) != 1 || all[0] != tc.forwarded {
			t.Errorf("%s: the upstream saw %q, want only %s", tc.trusted, all, tc.forwarded)
		}
	}
}
