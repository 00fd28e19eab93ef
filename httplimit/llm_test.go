package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/llmtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/llmusage"
	"github.com/sluicehq/sluice/redisstore"
)

// tokenServer serves h behind a token budget of the given limit per
// X-Tenant, counting the total tokens of LLM answers; settled receives
// each settle.
func tokenServer(t *testing.T, store sluice.Store, lim sluice.Limit, tc *decide.TokenCost, h http.Handler, settled func(decide.Settled)) *httptest.Server {
	t.Helper()
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits:  []httplimit.Limit{{Name: "tokens", Key: httplimit.ByHeader("X-Tenant"), Limit: lim, Late: &decide.LateCost{Tokens: tc}}},
		Settled: func(_ *http.Request, s decide.Settled) { settled(s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, tenant, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// chatBody is a Chat Completions request whose prompt is estimated at
// prompt tokens (4 bytes each).
func chatBody(prompt, maxTokens int64, stream bool) string {
	s := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":%q}]`, strings.Repeat("word", int(prompt)))
	if maxTokens != 0 {
		s += fmt.Sprintf(`,"max_tokens":%d`, maxTokens)
	}
	if stream {
		s += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return s + "}"
}

// TestTokensSettleFromAnswer: each answer shape settles what it reports,
// and one that reports none an estimate.
func TestTokensSettleFromAnswer(t *testing.T) {
	up := llmtest.New(llmtest.Config{PromptPercent: 150})
	answer := func(body string, ct string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			io.WriteString(w, body)
		})
	}
	cases := []struct {
		name                string
		h                   http.Handler
		path, body          string
		reserved, actual    int64
		estimated, readFrom bool
	}{
		{"openai json", up, "/v1/chat/completions", chatBody(20, 50, false), 70, 80, false, false},
		{"openai stream", up, "/v1/chat/completions", chatBody(20, 50, true), 70, 80, false, false},
		{"anthropic json", up, "/v1/messages", chatBody(20, 50, false), 70, 80, false, false},
		{"anthropic stream", up, "/v1/messages", strings.Replace(chatBody(20, 50, true), `,"stream_options":{"include_usage":true}`, "", 1), 70, 80, false, false},
		{"stream without usage", up, "/v1/chat/completions", strings.Replace(chatBody(20, 50, true), "true}", "false}", 1), 70, 20 + 50, true, false},
		{"no maximum", up, "/v1/chat/completions", chatBody(20, 0, false), 20 + 1024, 30 + 16, false, false},
		{"usage in a comment", answer(": {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"12345678\"}}]}\n\n", "text/event-stream"), "/", chatBody(20, 50, true), 70, 22, true, false},
		{"absurd usage", answer(`{"usage":{"prompt_tokens":999999999999999999999,"completion_tokens":1}}`, "application/json"), "/", chatBody(20, 50, false), 70, 100000, false, false},
		{"negative usage", answer(`{"usage":{"prompt_tokens":-100000,"completion_tokens":-5}}`, "application/json"), "/", chatBody(20, 50, false), 70, 20, true, false},
		{"compressed answer", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "\x1f\x8b")
		}), "/", chatBody(20, 50, false), 70, 70, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := make(chan decide.Settled, 1)
			srv := tokenServer(t, memStore(t), sluice.FixedWindow(100000, 24*3600e9), &decide.TokenCost{}, c.h, func(s decide.Settled) { got <- s })
			if status, body := post(t, srv.URL+c.path, "a", c.body); status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			s := <-got
			if s.Reserved != c.reserved || s.Actual != c.actual || s.Estimated != c.estimated {
				t.Errorf("settled reserved %d actual %d estimated %v; want %d, %d, %v", s.Reserved, s.Actual, s.Estimated, c.reserved, c.actual, c.estimated)
			}
		})
	}
}

// TestTokensHostileRequests: every request a client can send ends in a
// counted decision or a 4xx that never reaches the upstream.
func TestTokensHostileRequests(t *testing.T) {
	var reached atomic.Int64
	up := llmtest.New(llmtest.Config{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1); up.ServeHTTP(w, r) })
	var settled []decide.Settled
	var mu sync.Mutex
	srv := tokenServer(t, memStore(t), sluice.FixedWindow(10000, 24*3600e9), &decide.TokenCost{MaxRequestBytes: 1 << 16}, h, func(s decide.Settled) {
		mu.Lock()
		settled = append(settled, s)
		mu.Unlock()
	})
	refused := []struct{ name, body string }{
		{"max_tokens 0", `{"max_tokens":0}`},
		{"max_tokens negative", `{"max_tokens":-5}`},
		{"max_tokens a string", `{"max_tokens":"500"}`},
		{"max_tokens a fraction", `{"max_tokens":2.5}`},
		{"max_tokens twice", `{"max_tokens":1,"max_tokens":100000}`},
		{"not json", `max_tokens=5`},
		{"empty", ``},
		{"an array", `[{"max_tokens":5}]`},
		{"cut", `{"max_tokens":5,"messages":[`},
	}
	for _, c := range refused {
		if status, body := post(t, srv.URL, "a", c.body); status != 400 || !strings.Contains(body, "body") {
			t.Errorf("%s: status %d, %s", c.name, status, body)
		}
	}
	if status, _ := post(t, srv.URL, "a", `{"messages":[{"content":"`+strings.Repeat("x", 1<<16)+`"}]}`); status != 413 {
		t.Errorf("a body beyond max_request_bytes: status %d, want 413", status)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
	// A huge maximum reserves the whole budget: admitted while it is whole.
	if status, _ := post(t, srv.URL, "b", chatBody(10, 1<<40, false)); status != 200 {
		t.Errorf("huge max_tokens on a whole budget: status %d, want 200", status)
	}
	if status, _ := post(t, srv.URL, "b", chatBody(10, 10, false)); status != 429 {
		t.Errorf("after a call that used the budget: status %d, want 429", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != 1 || settled[0].Reserved != 10000 || settled[0].Actual != 10000 || !settled[0].Capped {
		t.Errorf("settled %+v, want one reserving and charged the capacity (capped)", settled)
	}
}

// TestTokensConcurrentBound: many concurrent streams under one key spend
// at most the budget plus the estimation error of the calls admitted.
func TestTokensConcurrentBound(t *testing.T) {
	for _, name := range []string{"memstore", "redis"} {
		t.Run(name, func(t *testing.T) {
			var store sluice.Store = memStore(t)
			if name == "redis" {
				red, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { red.Close() })
				store = red
			}
			concurrentBound(t, store, 120)
		})
	}
}

func concurrentBound(t *testing.T, store sluice.Store, calls int) {
	const (
		budget   = 10000
		prompt   = 100 // estimated; the upstream reports 20% more
		output   = 300
		reserved = prompt + output
		actual   = prompt*120/100 + output
	)
	up := llmtest.New(llmtest.Config{PromptPercent: 120, ChunkTokens: 10})
	var charged atomic.Int64
	srv := tokenServer(t, store, sluice.FixedWindow(budget, 24*3600e9), &decide.TokenCost{}, up, func(s decide.Settled) {
		if s.Err != nil {
			t.Error(s.Err)
		}
		charged.Add(s.Actual)
	})
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			status, body := post(t, srv.URL+"/v1/chat/completions", "tenant", chatBody(prompt, output, i%2 == 0))
			switch status {
			case 200:
				served.Add(1)
			case 429:
				refused.Add(1)
			default:
				t.Errorf("status %d: %s", status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	srv.Close() // every settle has run
	// Over-spend bound: each admitted call reserved 400 and used 420; the
	// reservations admitted fit the budget, so what was used is at most
	// the budget plus 20 per call admitted.
	admitted := served.Load()
	bound := int64(budget) + admitted*(actual-reserved)
	if used := up.Tokens.Load(); used > bound || used < budget-2*actual || used != charged.Load() {
		t.Errorf("%d calls served %d tokens, charged %d; want at most %d (budget %d + %d per call), at least %d", admitted, used, charged.Load(), bound, budget, actual-reserved, budget-2*actual)
	}
	if admitted+refused.Load() != int64(calls) || admitted > budget/reserved {
		t.Errorf("served %d, refused %d of %d; at most %d fit the budget", admitted, refused.Load(), calls, budget/reserved)
	}
	t.Logf("%d calls: %d served (%d tokens, budget %d), %d refused", calls, admitted, up.Tokens.Load(), budget, refused.Load())
}

// TestSoftLimit: past the soft share, admitted responses say so, and the
// key's passing it is counted once.
func TestSoftLimit(t *testing.T) {
	var passed atomic.Int64
	mw, err := httplimit.New(sluice.New(memStore(t)), httplimit.Config{
		Limits: []httplimit.Limit{{Name: "tokens", Key: httplimit.ByHeader("X-Tenant"), Limit: sluice.FixedWindow(1000, 24*3600e9),
			Late: &decide.LateCost{Tokens: &decide.TokenCost{}}, Soft: 800}},
		SoftLimit: func(limit string) { passed.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(llmtest.New(llmtest.Config{})))
	defer srv.Close()
	for i := 1; i <= 11; i++ {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatBody(20, 80, false)))
		req.Header.Set("X-Tenant", "a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got, want := resp.Header.Get(httplimit.SoftLimitHeader), ""
		if i >= 8 && i <= 10 {
			want = "tokens"
		}
		if status := resp.StatusCode; got != want || status != 200 && i <= 10 || status != 429 && i == 11 {
			t.Errorf("call %d (%d tokens used after it): status %d, %s %q, want %q", i, 100*i, status, httplimit.SoftLimitHeader, got, want)
		}
	}
	if n := passed.Load(); n != 1 {
		t.Errorf("the key passed the soft share %d times, want once", n)
	}
}

// TestTokensMoney: a price table charges each call its model's price of
// the usage; a model missing from it is refused, or charged the default.
func TestTokensMoney(t *testing.T) {
	ps := &llmusage.Prices{Models: map[string]llmusage.Price{"gpt-4o": {Input: 2_500_000, Output: 10_000_000}}}
	got := make(chan decide.Settled, 1)
	srv := tokenServer(t, memStore(t), sluice.FixedWindow(50_000_000, 24*3600e9), &decide.TokenCost{Prices: ps}, llmtest.New(llmtest.Config{PromptPercent: 200}),
		func(s decide.Settled) { got <- s })
	// 1,000 prompt tokens estimated (2,000 reported) and 500 output.
	body := func(model string) string {
		return strings.Replace(chatBody(1000, 500, true), `"gpt-4o"`, `"`+model+`"`, 1)
	}
	if status, b := post(t, srv.URL+"/v1/chat/completions", "a", body("gpt-4o")); status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	s := <-got
	if s.Reserved != 2500+5000 || s.Actual != 5000+5000 || s.Estimated {
		t.Errorf("reserved %d, charged %d micro-dollars; want 7500 and 10000", s.Reserved, s.Actual)
	}
	if status, b := post(t, srv.URL+"/v1/chat/completions", "a", body("gpt-5-unpriced")); status != 400 || !strings.Contains(b, "has no price") {
		t.Errorf("an unpriced model: status %d, %s", status, b)
	}
	if status, b := post(t, srv.URL+"/v1/chat/completions", "a", `{"max_tokens":5}`); status != 400 || !strings.Contains(b, "has no price") {
		t.Errorf("no model: status %d, %s", status, b)
	}
	ps = &llmusage.Prices{Models: ps.Models, Default: &llmusage.Price{Input: 15_000_000, Output: 75_000_000}}
	srv = tokenServer(t, memStore(t), sluice.FixedWindow(50_000_000, 24*3600e9), &decide.TokenCost{Prices: ps}, llmtest.New(llmtest.Config{PromptPercent: 200}),
		func(s decide.Settled) { got <- s })
	if status, b := post(t, srv.URL+"/v1/chat/completions", "a", body("gpt-5-unpriced")); status != 200 {
		t.Fatalf("an unpriced model with a default price: status %d, %s", status, b)
	}
	if s := <-got; s.Actual != 30000+37500 {
		t.Errorf("charged %d at the default price, want 67500", s.Actual)
	}
}

// TestTokensStreamCut: a client that hangs up in the middle of a stream is
// charged the estimate of what was streamed to it, not nothing.
func TestTokensStreamCut(t *testing.T) {
	got := make(chan decide.Settled, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\""+strings.Repeat("x", 400)+"\"}}]}\n\n")
		}
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the client has gone; the rest is never sent
	})
	srv := tokenServer(t, memStore(t), sluice.FixedWindow(100000, 24*3600e9), &decide.TokenCost{}, h, func(s decide.Settled) { got <- s })
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(chatBody(20, 5000, true)))
	req.Header.Set("X-Tenant", "a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 10))
	resp.Body.Close()
	s := <-got
	if !s.Estimated || s.Reserved != 5020 || s.Actual != 20+300 {
		t.Errorf("settled %+v; want the reservation 5020 replaced by an estimate: 20 prompt + 1200/4 streamed", s)
	}
}

// TestTokensSeparateLimits: limits on input, output and total tokens and on
// requests are checked together, all or nothing: a call the output budget
// refuses charges none of the others.
func TestTokensSeparateLimits(t *testing.T) {
	store := memStore(t)
	tenant := httplimit.ByHeader("X-Tenant")
	day := 24 * time.Hour
	var settled atomic.Int64
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits: []httplimit.Limit{
			{Name: "input", Key: tenant, Limit: sluice.FixedWindow(10000, day), Late: &decide.LateCost{Tokens: &decide.TokenCost{Measure: llmusage.Input}}},
			{Name: "output", Key: tenant, Limit: sluice.FixedWindow(250, day), Late: &decide.LateCost{Tokens: &decide.TokenCost{Measure: llmusage.Output}}},
			{Name: "total", Key: tenant, Limit: sluice.FixedWindow(10000, day), Late: &decide.LateCost{Tokens: &decide.TokenCost{}}},
			{Name: "calls", Key: tenant, Limit: sluice.FixedWindow(100, day)},
		},
		Settled: func(*http.Request, decide.Settled) { settled.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(llmtest.New(llmtest.Config{})))
	defer srv.Close()
	statuses := ""
	for range 4 {
		status, _ := post(t, srv.URL+"/v1/chat/completions", "a", chatBody(100, 100, false))
		statuses += fmt.Sprint(status, " ")
	}
	if statuses != "200 200 429 429 " {
		t.Fatalf("statuses %s; want two calls of 100 output tokens under 250, then refusals", statuses)
	}
	// What the limits hold: two calls' worth each, nothing of the refused.
	lim := sluice.New(store)
	for _, c := range []struct {
		name  string
		limit sluice.Limit
		used  int64
	}{{"input", sluice.FixedWindow(10000, day), 200}, {"output", sluice.FixedWindow(250, day), 200}, {"total", sluice.FixedWindow(10000, day), 400}, {"calls", sluice.FixedWindow(100, day), 2}} {
		d, err := lim.Check(context.Background(), sluice.Request{Key: string(decide.AppendKey(nil, c.name, "a")), Limit: c.limit, Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		if used := d.Limit - d.Remaining; used != c.used {
			t.Errorf("limit %s holds %d, want %d", c.name, used, c.used)
		}
	}
	if n := settled.Load(); n != 6 {
		t.Errorf("%d settles, want 6 (three token limits of two calls)", n)
	}
}

// TestTokensBodyLength: the body read to reserve is held to the length the
// request declared: one longer than its Content-Length, or shorter, is a
// 400 and never reaches the handler; one of unknown length (chunked) is
// read up to the limit.
func TestTokensBodyLength(t *testing.T) {
	mw, err := httplimit.New(sluice.New(memStore(t)), httplimit.Config{Limits: []httplimit.Limit{{
		Name: "tokens", Key: httplimit.Global, Limit: sluice.FixedWindow(10000, time.Hour), Late: &decide.LateCost{Tokens: &decide.TokenCost{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
	}))
	body := chatBody(10, 10, false)
	for _, c := range []struct {
		name   string
		length int64
		status int
	}{{"exact", int64(len(body)), 200}, {"unknown", -1, 200}, {"longer than declared", 10, 400}, {"shorter than declared", int64(len(body)) + 5, 400}} {
		got = got[:0]
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.ContentLength = c.length
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case w.Code != c.status:
			t.Errorf("%s: status %d, want %d (%s)", c.name, w.Code, c.status, w.Body)
		case c.status == 200 && (len(got) != 1 || got[0] != body):
			t.Errorf("%s: the handler read %q, want the body intact", c.name, got)
		case c.status != 200 && len(got) != 0:
			t.Errorf("%s: refused, yet the handler ran", c.name)
		}
	}
}
