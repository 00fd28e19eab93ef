package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/api"
	"github.com/sluicehq/sluice/server/internal/reloadtest"
)

// usagePolicy gives each tenant a token budget and a money budget priced
// per model (micro-dollars), and a route whose cost a header reports.
const usagePolicy = `
rules:
  - name: llm
    match: {path: /v1/}
    limits:
      - {name: tokens, key: header:X-Tenant, algorithm: fixed_window, limit: 10000, window: 1d, cost: {tokens: total}}
      - name: usd
        key: header:X-Tenant
        algorithm: fixed_window
        limit: 50000000
        window: 1d
        cost:
          prices: {gpt-4o: {input: 2.50, output: 10.00}, gpt-4o-mini: {input: 0.15, output: 0.60}}
  - name: rows
    match: {path: /rows}
    limits:
      - {name: rows, key: header:X-Tenant, algorithm: fixed_window, limit: 1000, window: 1d, cost: {reserve: 5, response_header: X-Rows}}
`

// apiServer serves the decision API over real HTTP with policy; post
// sends a body to a path and returns the status and the decoded answer.
func apiServer(t *testing.T, text string) func(path, body string) (int, map[string]any) {
	p := reloadtest.Parse(t, "usage", text)
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	ap, err := api.New(api.Config{Limiter: sluice.New(mem), Policy: func() *policy.Policy { return p }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ap.Handler())
	t.Cleanup(srv.Close)
	return func(path, body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
}

// settled returns the charge and what is left of each limit a settle
// answer names: name -> [charged, remaining].
func settledOf(v map[string]any) map[string][2]int64 {
	out := map[string][2]int64{}
	ss, _ := v["settled"].([]any)
	for _, s := range ss {
		m := s.(map[string]any)
		out[m["name"].(string)] = [2]int64{int64(m["charged"].(float64)), int64(m["remaining"].(float64))}
	}
	return out
}

func llmCheck(tenant, llm string) string {
	return fmt.Sprintf(`{"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {"X-Tenant": %q}}, "llm": %s}`, tenant, llm)
}

// TestSettleUsage: /v1/settle charges token and money limits from the
// usage the caller read, as the gateway charges an answer's: the tokens
// it reports, and the price of the model the check reserved for.
func TestSettleUsage(t *testing.T) {
	post := apiServer(t, usagePolicy)
	status, v := post("/v1/check", llmCheck("acme", `{"model": "gpt-4o", "max_tokens": 500, "prompt_bytes": 4000}`))
	if status != 200 || v["allowed"] != true {
		t.Fatalf("check: %d %v", status, v)
	}
	token := v["settle_token"].(string)
	// 1,200 prompt and 300 completion tokens: 1,500 tokens; 3,000 + 3,000
	// micro-dollars at 2.50 and 10.00 a million.
	status, v = post("/v1/settle", `{"token": "`+token+`", "usage": {"prompt_tokens": 1200, "completion_tokens": 300}}`)
	got := settledOf(v)
	if status != 200 || got["tokens"] != [2]int64{1500, 8500} || got["usd"] != [2]int64{6000, 50000000 - 6000} {
		t.Errorf("settle: %d %v, want tokens 1500 (8500 left), usd 6000", status, v)
	}
	if status, v := post("/v1/settle", `{"token": "`+token+`", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}`); status != http.StatusConflict {
		t.Errorf("a second settle: %d %v, want 409", status, v)
	}
	// Anthropic's and the Responses API's names, and a total.
	_, v = post("/v1/check", llmCheck("beta", `{"model": "gpt-4o-mini", "max_tokens": 100}`))
	status, v = post("/v1/settle", `{"token": "`+v["settle_token"].(string)+`", "usage": {"input_tokens": 1000, "output_tokens": 1000, "total_tokens": 2000}}`)
	if got := settledOf(v); status != 200 || got["tokens"][0] != 2000 || got["usd"][0] != 150+600 {
		t.Errorf("settle with input/output_tokens: %d %v, want 2000 tokens, 750 micro-dollars (the mini's price)", status, v)
	}
}

// TestSettleUsageHostile: whatever a client sends to settle an LLM call
// ends in a 4xx (the token still good for a valid settle) or a counted
// charge; never in free tokens.
func TestSettleUsageHostile(t *testing.T) {
	post := apiServer(t, usagePolicy)
	check := func(tenant string) string {
		status, v := post("/v1/check", llmCheck(tenant, `{"model": "gpt-4o", "max_tokens": 500, "prompt_bytes": 4000}`))
		if status != 200 {
			t.Fatalf("check: %d %v", status, v)
		}
		return v["settle_token"].(string)
	}
	token := check("acme")
	for _, bad := range []string{
		`{"prompt_tokens": -1, "completion_tokens": 300}`,
		`{"prompt_tokens": 100, "completion_tokens": 1125899906842625}`, // past 2^50
		`{"prompt_tokens": 100, "completion_tokens": 2.5}`,
		`{"prompt_tokens": 100, "completion_tokens": "300"}`,
		`{"prompt_tokens": 100, "input_tokens": 0, "completion_tokens": 300}`, // which?
		`{"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 1}`,
		`{}`,
		`{"prompt_tokens": 100, "completion_tokens": 300, "model": "gpt-4o-mini"}`, // the model is the check's
	} {
		if status, v := post("/v1/settle", `{"token": "`+token+`", "usage": `+bad+`}`); status != http.StatusBadRequest {
			t.Errorf("usage %s: %d %v, want 400", bad, status, v)
		}
	}
	// A forged token: the check's payload altered (another reservation).
	raw, _ := base64.RawURLEncoding.DecodeString(token)
	raw[len(raw)/2] ^= 1
	if status, v := post("/v1/settle", `{"token": "`+base64.RawURLEncoding.EncodeToString(raw)+`", "usage": {"prompt_tokens": 0, "completion_tokens": 0}}`); status != http.StatusForbidden {
		t.Errorf("an altered token: %d %v, want 403", status, v)
	}
	// The refusals spent nothing: the token settles, absurd usage capped
	// at the limits' capacity.
	status, v := post("/v1/settle", `{"token": "`+token+`", "usage": {"prompt_tokens": 1000000000, "completion_tokens": 1000000000}}`)
	if got := settledOf(v); status != 200 || got["tokens"] != [2]int64{10000, 0} || got["usd"][0] != 50000000 {
		t.Errorf("absurd usage: %d %v, want each limit charged its capacity", status, v)
	}
	// Usage without the output a price needs: the reservation stands
	// (1,000 prompt + 500 output tokens; 2,500 + 5,000 micro-dollars).
	status, v = post("/v1/settle", `{"token": "`+check("beta")+`", "usage": {"prompt_tokens": 10}}`)
	if got := settledOf(v); status != 200 || got["usd"][0] != 7500 {
		t.Errorf("usage without output: %d %v, want the money reservation (7500) charged", status, v)
	}
	// A model missing from the price table is refused at the check.
	if status, v := post("/v1/check", llmCheck("gamma", `{"model": "gpt-5", "max_tokens": 10}`)); status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(v), "no price") {
		t.Errorf("an unpriced model: %d %v, want 400", status, v)
	}
	// Usage for a check that reserved no LLM tokens: 400, and its token
	// still settles with its cost.
	status, v = post("/v1/check", `{"request": {"method": "GET", "path": "/rows", "headers": {"X-Tenant": "acme"}}}`)
	if status != 200 {
		t.Fatalf("rows check: %d %v", status, v)
	}
	rows := v["settle_token"].(string)
	if status, v := post("/v1/settle", `{"token": "`+rows+`", "usage": {"prompt_tokens": 0, "completion_tokens": 0}}`); status != http.StatusBadRequest {
		t.Errorf("usage for a check without LLM tokens: %d %v, want 400", status, v)
	}
	if status, v := post("/v1/settle", `{"token": "`+rows+`", "cost": 40}`); status != 200 || settledOf(v)["rows"][0] != 40 {
		t.Errorf("then its cost: %d %v, want 40 charged", status, v)
	}
}
