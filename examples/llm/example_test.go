package llm_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/llmtest"
	"github.com/sluicehq/sluice/internal/proctest"
)

// binary is the sluice binary, built once by TestMain.
var binary string

func TestMain(m *testing.M) { proctest.Main(m, "../..", "./cmd/sluice", &binary) }

// gateway runs `sluice serve --policy policy --upstream` the stand-in, and
// returns the gateway's URL and the stand-in.
func gateway(t *testing.T, policy string, cfg llmtest.Config) (string, *llmtest.Server) {
	t.Helper()
	up := llmtest.New(cfg)
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	p := proctest.Start(t, binary, proctest.CleanEnv(), "serve", "--policy", policy, "--upstream", srv.URL,
		"--gateway", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--api", "", "--grpc", "", "--log-format", "json")
	return "http://" + p.Addr("gateway"), up
}

// call is one LLM call: the API, a prompt of about prompt tokens (4 bytes
// each) and max_tokens.
type call struct {
	path           string
	prompt, maxOut int
	stream         bool
}

func (c call) body() string {
	b := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":%q}]`, c.maxOut, strings.Repeat("word", c.prompt))
	if c.stream {
		b += `,"stream":true`
		if c.path == "/v1/chat/completions" {
			b += `,"stream_options":{"include_usage":true}`
		}
	}
	return b + "}"
}

// do sends c for tenant and reads the whole answer; it returns the status.
func do(t *testing.T, url, tenant string, c call) int {
	req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader(c.body()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// burst sends n calls at once, alternating the APIs and JSON with streams,
// and returns how many were served and refused.
func burst(t *testing.T, url, tenant string, n, prompt, maxOut int) (served, refused int64) {
	var wg sync.WaitGroup
	var ok, no atomic.Int64
	paths := []string{"/v1/chat/completions", "/v1/messages"}
	for i := range n {
		c := call{path: paths[i%2], prompt: prompt, maxOut: maxOut, stream: i%4 >= 2}
		wg.Go(func() {
			switch status := do(t, url, tenant, c); status {
			case 200:
				ok.Add(1)
			case 429:
				no.Add(1)
			default:
				t.Errorf("status %d", status)
			}
		})
	}
	wg.Wait()
	return ok.Load(), no.Load()
}

// TestTenThousandTokensADay is the example's promise: 40 concurrent calls of about
// 1,500 tokens from one tenant are served 8,500 to 10,500 tokens and then
// refused; 40 calls of about 110 tokens from another are all served.
func TestTenThousandTokensADay(t *testing.T) {
	// The stand-in counts prompts 10% above sluice's estimate.
	url, up := gateway(t, "policy.yaml", llmtest.Config{PromptPercent: 110, Pause: time.Millisecond})
	served, refused := burst(t, url, "big", 40, 500, 1000)
	big := up.Tokens.Load()
	t.Logf("tenant big: %d served (%d tokens), %d refused", served, big, refused)
	if big < 8500 || big > 10500 {
		t.Errorf("tenant big was served %d tokens, want 8,500 to 10,500", big)
	}
	if served+refused != 40 || refused == 0 {
		t.Errorf("served %d, refused %d", served, refused)
	}
	if status := do(t, url, "big", call{path: "/v1/messages", prompt: 500, maxOut: 1000}); status != 429 {
		t.Errorf("after the budget: status %d, want 429", status)
	}
	served, refused = burst(t, url, "small", 40, 10, 100)
	if served != 40 || refused != 0 {
		t.Errorf("tenant small: served %d, refused %d of 40 calls of about 110 tokens", served, refused)
	}
	t.Logf("tenant small: %d served (%d tokens)", served, up.Tokens.Load()-big)
	// A call without a tenant is refused, never free.
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(call{prompt: 1, maxOut: 1}.body()))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("without X-Tenant: %v %v", resp.StatusCode, err)
	}
}

// TestMoneyBudget: money.yaml charges each call its model's price of its
// usage, in micro-dollars, under the monthly budget.
func TestMoneyBudget(t *testing.T) {
	url, _ := gateway(t, "money.yaml", llmtest.Config{})
	var rl string
	for _, stream := range []bool{true, false} {
		c := call{path: "/v1/chat/completions", prompt: 1000, maxOut: 500, stream: stream}
		req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader(strings.Replace(c.body(), `"m"`, `"gpt-4o"`, 1)))
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		rl = resp.Header.Get("RateLimit")
	}
	// Each call: 1,000 input tokens at 2.50 USD and 500 output at 10 USD a
	// million: 7,500 micro-dollars. The second's answer counts the first
	// as settled and its own reservation (the same).
	if !strings.Contains(rl, `"usd-per-month";r=49985000;`) {
		t.Errorf("RateLimit: %s; want usd-per-month with 49,985,000 micro-dollars left", rl)
	}
}
