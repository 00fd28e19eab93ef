package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeLLM is an upstream that answers like an LLM API: it streams its
// answer and reports the tokens the call used, the n-th call of a user
// costs[n % len(costs)], in the X-Tokens-Used header or, for every other
// call, in the trailer of that name (the count is known only at the end of
// a stream). It records what it reported.
type fakeLLM struct {
	costs    []int64
	mu       sync.Mutex
	calls    map[string]int
	reported map[string]int64
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user := r.Header.Get("X-User")
	f.mu.Lock()
	n := f.calls[user]
	f.calls[user]++
	cost := f.costs[n%len(f.costs)]
	f.reported[user] += cost
	f.mu.Unlock()
	used := strconv.FormatInt(cost, 10)
	if n%2 == 0 {
		w.Header().Set("X-Tokens-Used", used)
	} else {
		w.Header().Set("Trailer", "X-Tokens-Used")
	}
	io.WriteString(w, "The answer")
	http.NewResponseController(w).Flush() // a stream: the gateway's response ends after the settle
	io.WriteString(w, " is 42.\n")
	w.Header().Set("X-Tokens-Used", used)
}

func (f *fakeLLM) total(user string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reported[user]
}

// TestGatewaySettlesTokens: sluice serve in front of an LLM API that
// reports the tokens each call used. A user's budget of 10,000 tokens per
// minute stops them once their calls have used 10,000, within one call's
// overrun (and what the bucket refilled meanwhile); the client never sees
// the token count (strip); and the budget is charged the sum of the
// reported costs.
func TestGatewaySettlesTokens(t *testing.T) {
	for _, st := range []string{"memory", "redis"} {
		t.Run(st, func(t *testing.T) { gatewaySettlesTokens(t, st) })
	}
}

func gatewaySettlesTokens(t *testing.T, st string) {
	llm := &fakeLLM{costs: []int64{1200, 300, 2500, 800, 1700, 3900, 650, 2100}, calls: map[string]int{}, reported: map[string]int64{}}
	up := httptest.NewServer(llm)
	defer up.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: llm
    match: {path: /v1/}
    limits:
      - name: tokens
        key: header:X-User
        algorithm: token_bucket
        rate: 10000/m
        burst: 10000
        cost: {reserve: 500, response_header: X-Tokens-Used, max: 4000, strip: true}
`)
	p := start(t, nil, append(storeArgs(t, st), "--upstream", up.URL, "--policy", policy)...)
	start := time.Now()
	admitted := 0
	for ; admitted < 40; admitted++ {
		req, _ := http.NewRequest("POST", p.url("gateway", "/v1/chat"), nil)
		req.Header.Set("X-User", "alice")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
		if resp.StatusCode != 200 || string(body) != "The answer is 42.\n" {
			t.Fatalf("call %d: %d %q", admitted, resp.StatusCode, body)
		}
		if v := resp.Header.Get("X-Tokens-Used") + resp.Trailer.Get("X-Tokens-Used"); v != "" {
			t.Fatalf("call %d: the client saw X-Tokens-Used %q", admitted, v)
		}
	}
	// The bucket refills 10,000 a minute while the calls run.
	refill := int64(time.Since(start).Seconds()*10000/60) + 1
	used := llm.total("alice")
	t.Logf("%d calls admitted, %d tokens used, %d refilled at most", admitted, used, refill)
	if used < 10000-500 || used > 10000+refill+4000-500 {
		t.Errorf("alice used %d tokens in %d calls before a refusal; want 10,000 within one call's overrun (at most %d more)", used, admitted, refill+3500)
	}
	if n := metric(t, p, `sluice_settles_total{limit="tokens",result="reported",source="gateway"}`); n != float64(admitted) {
		t.Errorf("sluice_settles_total: %v reported, want %d", n, admitted)
	}
	if n := metric(t, p, `sluice_settled_cost_total{limit="tokens",source="gateway"}`); n != float64(used) {
		t.Errorf("sluice_settled_cost_total: %v, want %d", n, used)
	}
	// Bob stays under the budget: what is left is 10,000 less what the
	// upstream reported, give or take the refill.
	start = time.Now()
	for range 3 {
		get(t, p.url("gateway", "/v1/chat"), "X-User", "bob")
	}
	var peek struct{ Decisions []struct{ Remaining int64 } }
	r := do(t, "POST", p.url("api", "/v1/check"), `{"request": {"path": "/v1/chat", "headers": {"X-User": "bob"}}, "hits": 0}`)
	if err := json.Unmarshal([]byte(r.body), &peek); err != nil || len(peek.Decisions) != 1 {
		t.Fatalf("peek: %d %s", r.status, r.body)
	}
	refill = int64(time.Since(start).Seconds()*10000/60) + 1
	want := 10000 - llm.total("bob")
	if got := peek.Decisions[0].Remaining; got < want || got > want+refill {
		t.Errorf("bob: %d left after %d reported; want %d (+%d refilled at most)", got, llm.total("bob"), want, refill)
	}
}

// TestSettleSharedSecret: two instances on one Redis with one
// settle_secret_file settle each other's tokens, and a token settles once
// across both; an instance with its own secret refuses them (403), and a
// secret file too short to be a secret stops sluice at start.
func TestSettleSharedSecret(t *testing.T) {
	dir := t.TempDir()
	policy, secret, config := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "secret"), filepath.Join(dir, "sluice.yaml")
	writeFile(t, policy, `
rules:
  - name: llm
    limits:
      - {name: tokens, key: header:X-User, algorithm: fixed_window, limit: 10000, window: 30d,
         cost: {reserve: 100, response_header: X-Tokens-Used, max: 5000}}
`)
	writeFile(t, secret, "c2x1aWNlIHNldHRsZSB0b2tlbnMgc2hhcmVkIHNlY3JldCBmb3IgdGVzdHM=\n")
	writeFile(t, config, "settle_secret_file: "+secret+"\n")
	args := append(storeArgs(t, "redis"), "--policy", policy)
	a := start(t, nil, append(args, "--config", config)...)
	b := start(t, nil, append(args, "--config", config)...)
	lone := start(t, nil, args...)
	check := func(p *proc) string {
		r := do(t, "POST", p.url("api", "/v1/check"), `{"request": {"path": "/", "headers": {"X-User": "ann"}}}`)
		var c struct {
			Token string `json:"settle_token"`
		}
		if json.Unmarshal([]byte(r.body), &c); r.status != 200 || c.Token == "" {
			t.Fatalf("check: %d %s", r.status, r.body)
		}
		return c.Token
	}
	settle := func(p *proc, token string) int {
		return do(t, "POST", p.url("api", "/v1/settle"), `{"token": "`+token+`", "cost": 0}`).status
	}
	fromA, fromB := check(a), check(b)
	for _, step := range []struct {
		desc  string
		p     *proc
		token string
		want  int
	}{
		{"A's token at B", b, fromA, 200},
		{"A's token again at A", a, fromA, 409},
		{"A's token again at B", b, fromA, 409},
		{"B's token at an instance with its own secret", lone, fromB, 403},
		{"B's token at A", a, fromB, 200},
	} {
		if got := settle(step.p, step.token); got != step.want {
			t.Errorf("%s: %d, want %d", step.desc, got, step.want)
		}
	}
	writeFile(t, secret, "short\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(append([]string(nil), serveArgs...), "--config", config)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "settle_secret_file: "+secret+": 5 bytes; want 32 to 4096") {
		t.Errorf("a 5-byte secret: %v\n%s", err, out)
	}
}

// TestGatewaySettleClientHangsUp: a client that hangs up in the middle of
// a stream whose cost comes in the trailer is charged what on_missing
// says (here max): hanging up gains it nothing.
func TestGatewaySettleClientHangsUp(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Tokens-Used")
		io.WriteString(w, "The answer")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the gateway cancels the request when its client goes
		w.Header().Set("X-Tokens-Used", "20")
	}))
	defer up.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: llm
    limits:
      - {name: tokens, key: header:X-User, algorithm: fixed_window, limit: 10000, window: 30d,
         cost: {reserve: 500, response_header: X-Tokens-Used, max: 4000, on_missing: max}}
`)
	p := start(t, nil, "--upstream", up.URL, "--policy", policy)
	req, _ := http.NewRequest("GET", p.url("gateway", "/v1/chat"), nil)
	req.Header.Set("X-User", "quitter")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "The answer" {
		t.Fatalf("first chunk: %q %v", buf, err)
	}
	resp.Body.Close() // hang up before the trailer
	peek := func() int64 {
		var a struct{ Decisions []struct{ Remaining int64 } }
		r := do(t, "POST", p.url("api", "/v1/check"), `{"request": {"path": "/v1/chat", "headers": {"X-User": "quitter"}}, "hits": 0}`)
		if json.Unmarshal([]byte(r.body), &a); len(a.Decisions) != 1 {
			t.Fatalf("peek: %d %s", r.status, r.body)
		}
		return a.Decisions[0].Remaining
	}
	// The settle lands once the gateway sees the client gone: wait for it
	// to be counted (after it is charged).
	missing := `sluice_settles_total{limit="tokens",result="missing",source="gateway"}`
	deadline := time.Now().Add(20 * time.Second)
	for metric(t, p, missing) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := metric(t, p, missing); n != 1 {
		t.Errorf("%s: %v, want 1", missing, n)
	}
	if got := peek(); got != 6000 {
		t.Errorf("after hanging up: %d left, want 6000 (max 4,000 charged)", got)
	}
}

// reloadPolicy is a token_bucket of 10 tokens an hour, whose burst a
// reload changes; each call reserves 1 and settles what the upstream
// reports in X-Tokens-Used.
func reloadPolicy(burst int) string {
	return sprintf(`
rules:
  - name: llm
    limits:
      - {name: tokens, key: header:X-User, algorithm: token_bucket, rate: 10/h, burst: %d,
         cost: {reserve: 1, response_header: X-Tokens-Used, max: 4}}
`, burst)
}

// reload writes content to the policy at path and has p load it (SIGHUP),
// its n-th successful load.
func reload(t *testing.T, p *proc, path, content string, n float64) {
	t.Helper()
	writeFile(t, path, content)
	p.signal(syscall.SIGHUP)
	waitFor(t, "the reload", func() bool {
		return metric(t, p, `sluice_config_reloads_total{config="policy",result="ok"}`) >= n
	})
}

// apiCheck decides a call of user through the decision API (hits 0 peeks)
// and returns whether it was admitted, what is left and its settle token.
func apiCheck(t *testing.T, p *proc, user string, hits int) (allowed bool, remaining int64, token string) {
	t.Helper()
	r := do(t, "POST", p.url("api", "/v1/check"), sprintf(`{"request": {"path": "/v1/chat", "headers": {"X-User": %q}}, "hits": %d}`, user, hits))
	var a struct {
		Allowed   bool
		Decisions []struct{ Remaining int64 }
		Token     string `json:"settle_token"`
	}
	if json.Unmarshal([]byte(r.body), &a); r.status != 200 || len(a.Decisions) != 1 {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	return a.Allowed, a.Decisions[0].Remaining, a.Token
}

// TestSettleAfterReload: a call is admitted under a burst of 4, the policy
// is reloaded with a burst of 10, other calls use 7 more, and then the
// first call settles 2 (1 more than it reserved). The settle charges the
// key under the limit it has now: 1 is left, the next call is admitted
// and the one after refused. Settled under the limit the call was
// admitted under, the bucket's usage was capped at 4 on the way back: 5
// were left, and 4 more calls admitted.
// The decision API's settle and the gateway's alike, on memory and Redis.
func TestSettleAfterReload(t *testing.T) {
	for _, st := range []string{"memory", "redis"} {
		for _, via := range []string{"api", "gateway"} {
			t.Run(st+"/"+via, func(t *testing.T) { settleAfterReload(t, st, via) })
		}
	}
}

func settleAfterReload(t *testing.T, st, via string) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release // the reload happens while the call runs
		w.Header().Set("X-Tokens-Used", "2")
		io.WriteString(w, "The answer is 42.\n")
	}))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, reloadPolicy(4))
	p := start(t, nil, append(storeArgs(t, st), "--upstream", up.URL, "--policy", path, "--watch=false")...)

	var token string
	done := make(chan response, 1)
	if via == "api" {
		_, _, token = apiCheck(t, p, "ann", 1)
	} else {
		go func() { done <- get(t, p.url("gateway", "/v1/chat"), "X-User", "ann") }()
		<-arrived
	}
	reload(t, p, path, reloadPolicy(10), 2)
	for i := range 7 {
		if ok, _, _ := apiCheck(t, p, "ann", 1); !ok {
			t.Fatalf("call %d after the reload refused", i)
		}
	}
	if via == "api" {
		r := do(t, "POST", p.url("api", "/v1/settle"), `{"token": "`+token+`", "cost": 2}`)
		if r.status != 200 || !strings.Contains(r.body, `"charged":2,"remaining":1`) {
			t.Errorf("settle: %d %s", r.status, r.body)
		}
	} else {
		close(release)
		if r := <-done; r.status != 200 {
			t.Fatalf("gateway call: %d %s", r.status, r.body)
		}
		waitFor(t, "the gateway's settle", func() bool {
			return metric(t, p, `sluice_settles_total{limit="tokens",result="reported",source="gateway"}`) == 1
		})
	}
	var got []string
	for _, hits := range []int{0, 1, 1, 1} {
		ok, left, _ := apiCheck(t, p, "ann", hits)
		got = append(got, sprintf("%v %d", ok, left))
	}
	if want := "true 1,true 0,false 0,false 0"; joinComma(got) != want {
		t.Errorf("after the settle: %s, want %s", joinComma(got), want)
	}
}
