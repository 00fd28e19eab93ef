package llmlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/llmtest"
	"github.com/sluicehq/sluice/llmlimit"
	"github.com/sluicehq/sluice/memstore"
)

func Example() {
	api := httptest.NewServer(llmtest.New(llmtest.Config{})) // an LLM API
	defer api.Close()
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()

	type tenant struct{}
	tr, err := llmlimit.New(sluice.New(store), llmlimit.Config{Limits: []llmlimit.Limit{{
		Name:  "tokens-per-day",
		Key:   func(r *http.Request) (string, error) { s, _ := r.Context().Value(tenant{}).(string); return s, nil },
		Limit: sluice.CalendarWindow(1000, sluice.Day, "UTC"),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}
	ctx := context.WithValue(context.Background(), tenant{}, "acme")
	for range 3 {
		body := `{"model":"m","max_tokens":400,"messages":[{"role":"user","content":"Hello"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/chat/completions", strings.NewReader(body))
		resp, err := client.Do(req)
		var refused *llmlimit.RefusedError
		if errors.As(err, &refused) {
			fmt.Println("refused by", refused.Limit)
			continue
		}
		io.Copy(io.Discard, resp.Body) // the answer, read to its end,
		resp.Body.Close()              // settles what it reported
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// 200 OK
	// refused by tokens-per-day
}
