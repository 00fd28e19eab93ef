package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/llmtest"
)

// llmSettlePolicy holds each tenant to a token budget and a money budget
// priced per model, in micro-dollars.
const llmSettlePolicy = `
rules:
  - name: llm
    match: {methods: [POST], path: /v1/}
    limits:
      - {name: tokens, key: header:X-Tenant, algorithm: fixed_window, limit: 10000, window: 1d, calendar: true, cost: {tokens: total}}
      - name: usd
        key: header:X-Tenant
        algorithm: fixed_window
        limit: 50000000
        window: 1d
        calendar: true
        cost: {prices: {gpt-4o: {input: 2.50, output: 10.00}, gpt-4o-mini: {input: 0.15, output: 0.60}}}
`

// TestAPISettlesUsageLikeGateway: a call through the gateway, whose answer
// reports 440 prompt and 200 completion tokens, and a call checked at one
// instance's /v1/check and settled at another's /v1/settle (a shared
// secret, on Redis) with the same usage, leave their tenants' budgets
// charged alike: 640 tokens, 3,100 micro-dollars at gpt-4o's price, the
// model the check named. The token settles once across the instances.
func TestAPISettlesUsageLikeGateway(t *testing.T) {
	up := httptest.NewServer(llmtest.New(llmtest.Config{PromptPercent: 110}))
	defer up.Close()
	dir := t.TempDir()
	policy, secret, config := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "secret"), filepath.Join(dir, "sluice.yaml")
	writeFile(t, policy, llmSettlePolicy)
	writeFile(t, secret, "c2x1aWNlIHNldHRsZSB0b2tlbnMgc2hhcmVkIHNlY3JldCBmb3IgdGVzdHM=\n")
	writeFile(t, config, "settle_secret_file: "+secret+"\n")
	args := append(storeArgs(t, "redis"), "--policy", policy, "--config", config)
	a := start(t, nil, append(args, "--upstream", up.URL)...)
	b := start(t, nil, args...)
	body := sprintf(`{"model":"gpt-4o","max_tokens":200,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("word", 400))
	if r := do(t, "POST", a.url("gateway", "/v1/chat/completions"), body, "X-Tenant", "via-gateway"); r.status != 200 {
		t.Fatalf("gateway call: %d %s", r.status, r.body)
	}
	check := `{"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {"X-Tenant": "via-api"}}, "llm": {"model": "gpt-4o", "max_tokens": 200, "prompt_bytes": 1600}}`
	r := do(t, "POST", a.url("api", "/v1/check"), check)
	var c struct {
		Token string `json:"settle_token"`
	}
	if json.Unmarshal([]byte(r.body), &c); r.status != 200 || c.Token == "" {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	settle := `{"token": "` + c.Token + `", "usage": {"prompt_tokens": 440, "completion_tokens": 200}}`
	if r := do(t, "POST", b.url("api", "/v1/settle"), settle); r.status != 200 {
		t.Fatalf("settle at the other instance: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", a.url("api", "/v1/settle"), settle); r.status != 409 {
		t.Errorf("the same settle at the first instance: %d %s, want 409", r.status, r.body)
	}
	left := func(tenant string) map[string]int64 {
		r := do(t, "POST", b.url("api", "/v1/check"), sprintf(`{"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {"X-Tenant": %q}}, "hits": 0}`, tenant))
		var v struct {
			Decisions []struct {
				Name      string
				Remaining int64
			}
		}
		json.Unmarshal([]byte(r.body), &v)
		out := map[string]int64{}
		for _, d := range v.Decisions {
			out[d.Name] = d.Remaining
		}
		return out
	}
	want := map[string]int64{"tokens": 10000 - 640, "usd": 50000000 - 3100}
	for _, tenant := range []string{"via-gateway", "via-api"} {
		if got := left(tenant); got["tokens"] != want["tokens"] || got["usd"] != want["usd"] {
			t.Errorf("%s: %v left, want %v", tenant, got, want)
		}
	}
}
