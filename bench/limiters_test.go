package bench

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/httprate"
)

// TestPolicies checks that every library admits everything under the
// generous policy and exactly the first request under the strict one.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	for _, lib := range libraries {
		t.Run(lib.name, func(t *testing.T) {
			for _, p := range []policy{generous, strict} {
				lim, err := lib.new(p, maxKeys)
				if err != nil {
					t.Fatal(err)
				}
				defer lim.Close()
				for _, key := range []string{"a", "b"} {
					for i := range 1000 {
						ok, err := lim.Allow(ctx, key)
						if err != nil {
							t.Fatalf("policy %d, key %s, call %d: %v", p, key, i, err)
						}
						if want := p == generous || i == 0; ok != want {
							t.Fatalf("policy %d, key %s, call %d: allowed %t, want %t", p, key, i, ok, want)
						}
					}
				}
			}
		})
	}
}

// TestHTTPRateMatchesOnLimit checks that the reproduction of httprate's
// decision agrees with httprate.RateLimiter.OnLimit call for call.
func TestHTTPRateMatchesOnLimit(t *testing.T) {
	const limit = 5
	ref := httprate.NewRateLimiter(limit, window)
	lim := &httprateLimiter{counter: httprate.NewLocalLimitCounter(window), limit: limit, length: window}
	start := time.Now().UTC()
	lim.offset = start.Sub(start.Truncate(window))

	ctx := context.Background()
	req := httptest.NewRequest("GET", "/", nil)
	for i := range 20 {
		key := []string{"a", "b", "c"}[i%3]
		want := !ref.OnLimit(httptest.NewRecorder(), req, key)
		got, err := lim.Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("call %d on %s: allowed %t, OnLimit says %t", i, key, got, want)
		}
	}
}
