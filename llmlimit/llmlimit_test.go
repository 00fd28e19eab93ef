package llmlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/llmtest"
	"github.com/sluicehq/sluice/llmlimit"
	"github.com/sluicehq/sluice/memstore"
)

type tenantKey struct{}

// byTenant keys a call by the tenant its context carries.
func byTenant(r *http.Request) (string, error) {
	s, _ := r.Context().Value(tenantKey{}).(string)
	return s, nil
}

func client(t testing.TB, h http.Handler, settled func(decide.Settled)) (*http.Client, string) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr, err := llmlimit.New(sluice.New(mem), llmlimit.Config{
		Limits:  []llmlimit.Limit{{Name: "tokens", Key: byTenant, Limit: sluice.CalendarWindow(4000, sluice.Day, "UTC")}},
		Settled: settled,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}, srv.URL
}

func call(c *http.Client, url, tenant, body string) (string, error) {
	ctx := context.WithValue(context.Background(), tenantKey{}, tenant)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func chat(prompt, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":%v,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`,
		maxTokens, stream, strings.Repeat("word", prompt))
}

func TestTransport(t *testing.T) {
	var charged atomic.Int64
	c, url := client(t, llmtest.New(llmtest.Config{PromptPercent: 110}), func(s decide.Settled) { charged.Add(s.Actual) })
	for i, stream := range []bool{false, true} {
		if _, err := call(c, url, "acme", chat(500, 1000, stream)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := charged.Load(); got != 2*(550+1000) {
		t.Errorf("charged %d, want 3100: each call's usage", got)
	}
	_, err := call(c, url, "acme", chat(500, 1000, false))
	var re *llmlimit.RefusedError
	if !errors.As(err, &re) || re.Limit != "tokens" || re.RetryAfter <= 0 {
		t.Errorf("a call past the budget: %v, want a RefusedError", err)
	}
	if _, err := call(c, url, "other", chat(10, 10, false)); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}

func TestTransportHostile(t *testing.T) {
	var reached atomic.Int64
	up := llmtest.New(llmtest.Config{})
	c, url := client(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1); up.ServeHTTP(w, r) }), nil)
	for _, body := range []string{"", "not json", `{"max_tokens":0}`, `{"max_tokens":-1}`, `{"max_tokens":"5"}`} {
		_, err := call(c, url, "acme", body)
		var ce *decide.ClientError
		if !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a ClientError", body, err)
		}
	}
	if reached.Load() != 0 {
		t.Errorf("%d refused calls reached the API", reached.Load())
	}
}

// TestTransportClosedEarly: an answer closed before its usage is charged
// the estimate of what was read.
func TestTransportClosedEarly(t *testing.T) {
	got := make(chan decide.Settled, 1)
	c, url := client(t, llmtest.New(llmtest.Config{ChunkTokens: 1}), func(s decide.Settled) { got <- s })
	ctx := context.WithValue(context.Background(), tenantKey{}, "acme")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(chat(100, 1000, true)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 100))
	resp.Body.Close()
	s := <-got
	if !s.Estimated || s.Actual < 100 || s.Actual > 200 {
		t.Errorf("settled %+v, want an estimate of the prompt (100) and the little text read", s)
	}
}
