package api_test

import (
	"encoding/json"
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

const tokensPolicy = `
rules:
  - name: llm
    match:
      path: /v1/
    limits:
      - name: tokens
        key: header:X-Tenant
        algorithm: fixed_window
        limit: 10000
        window: 1d
        cost: {tokens: total}
`

// TestCheckLLM: /v1/check reserves what the call's fields ask for, and
// /v1/settle charges the tokens the caller read from the answer.
func TestCheckLLM(t *testing.T) {
	p := reloadtest.Parse(t, "tokens", tokensPolicy)
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	ap, err := api.New(api.Config{Limiter: sluice.New(mem), Policy: func() *policy.Policy { return p }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) (int, map[string]any) {
		w := httptest.NewRecorder()
		ap.Handler().ServeHTTP(w, httptest.NewRequest("POST", path, strings.NewReader(body)))
		var v map[string]any
		json.Unmarshal(w.Body.Bytes(), &v)
		return w.Code, v
	}
	const req = `"request": {"method": "POST", "path": "/v1/chat/completions", "headers": {"X-Tenant": "acme"}}`
	for _, bad := range []string{
		`{` + req + `}`,
		`{` + req + `, "llm": {"max_tokens": 0}}`,
		`{` + req + `, "llm": {"max_tokens": -5}}`,
		`{` + req + `, "llm": {"prompt_bytes": -1}}`,
		`{` + req + `, "llm": {"max_tokens": "500"}}`,
		`{` + req + `, "hits": 3, "llm": {"max_tokens": 5}}`,
	} {
		if status, v := post("/v1/check", bad); status != http.StatusBadRequest {
			t.Errorf("%s: status %d, %v", bad, status, v)
		}
	}
	status, v := post("/v1/check", `{`+req+`, "llm": {"model": "m", "max_tokens": 500, "prompt_bytes": 4000}}`)
	if status != 200 || v["allowed"] != true {
		t.Fatalf("status %d: %v", status, v)
	}
	d := v["decisions"].([]any)[0].(map[string]any)
	if d["remaining"].(float64) != 10000-1500 {
		t.Errorf("remaining %v after reserving 1,000 prompt and 500 output tokens, want 8500", d["remaining"])
	}
	status, v = post("/v1/settle", `{"token": "`+v["settle_token"].(string)+`", "cost": 1700}`)
	if status != 200 {
		t.Fatalf("settle: status %d: %v", status, v)
	}
	if s := v["settled"].([]any)[0].(map[string]any); s["charged"].(float64) != 1700 || s["remaining"].(float64) != 8300 {
		t.Errorf("settled %v, want 1700 charged and 8300 left", s)
	}
}
