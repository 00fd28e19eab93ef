package sluiceclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// A sluice server refuses the second request of its window with
// Retry-After: 2; the retry reaches it no sooner than 2 s later, and no
// later than the backoff's jitter allows.
func TestRetryAfterSecondsFromSluice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(limited(t, sluice.FixedWindow(1, 2*time.Second), ok200)))
		var told []string
		c := newClient(t, roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := tr.RoundTrip(r)
			if err == nil && resp.StatusCode == 429 {
				told = append(told, resp.Header.Get("Retry-After"))
			}
			return resp, err
		}), Config{})
		if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
			t.Fatalf("first request: %d %v", code, err)
		}
		code, body, err := get(t, t.Context(), c)
		if code != 200 || body != "ok" || err != nil {
			t.Fatalf("second request: %d %q %v", code, body, err)
		}
		at := h.all()
		if len(at) != 3 || len(told) != 1 || told[0] != "2" {
			t.Fatalf("server saw %d requests and answered Retry-After %q, want 3 (one refused with 2, one retried)", len(at), told)
		}
		if gap := at[2].Sub(at[1]); gap < 2*time.Second || gap >= 2*time.Second+500*time.Millisecond {
			t.Fatalf("retried %s after a Retry-After of 2 s, want [2s, 2.5s)", gap)
		}
	})
}

// A Retry-After given as an HTTP-date is honoured.
func TestRetryAfterHTTPDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		var n atomic.Int64
		tr := serve(t, h.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				refuse(503, "Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat)).ServeHTTP(w, r)
				return
			}
			ok200(w, r)
		})))
		c := newClient(t, tr, Config{BaseBackoff: time.Millisecond})
		if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
			t.Fatalf("request: %d %v", code, err)
		}
		at := h.all()
		if len(at) != 2 {
			t.Fatalf("server saw %d requests, want 2", len(at))
		}
		if gap := at[1].Sub(at[0]); gap < 3*time.Second || gap > 3*time.Second+time.Millisecond {
			t.Fatalf("retried %s after Retry-After of now+3s as a date, want 3s", gap)
		}
	})
}

// With no Retry-After, an exhausted member of the RateLimit field (the form
// sluice sends) says how long to wait.
func TestRateLimitResetWhenNoRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		var n atomic.Int64
		tr := serve(t, h.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				refuse(429, "RateLimit", `"global";r=7;t=1, "name";r=0;t=5`).ServeHTTP(w, r)
				return
			}
			ok200(w, r)
		})))
		c := newClient(t, tr, Config{BaseBackoff: time.Millisecond})
		if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
			t.Fatalf("request: %d %v", code, err)
		}
		if at := h.all(); len(at) != 2 || at[1].Sub(at[0]) < 5*time.Second {
			t.Fatalf("server saw %v, want a retry 5 s after the refusal", at)
		}
	})
}

// A deadline shorter than Retry-After returns at once with the server's
// answer, body and all.
func TestDeadlineShorterThanRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(refuse(429, "Retry-After", "2")))
		c := newClient(t, tr, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		code, body, err := get(t, ctx, c)
		if code != 429 || body != "refused" || err != nil {
			t.Fatalf("got %d %q %v, want the server's 429", code, body, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("returned after %s, want at once", waited)
		}
		if len(h.all()) != 1 {
			t.Fatalf("server saw %d requests, want 1", len(h.all()))
		}
	})
}

// A Retry-After longer than MaxRetryAfter is not waited for.
func TestRetryAfterBeyondMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(refuse(429, "Retry-After", "3600")))
		c := newClient(t, tr, Config{})
		start := time.Now()
		if code, _, _ := get(t, t.Context(), c); code != 429 || time.Since(start) != 0 || len(h.all()) != 1 {
			t.Fatalf("got %d after %s and %d requests, want the 429 at once", code, time.Since(start), len(h.all()))
		}
	})
}

// Only what is safe to send twice is retried: a POST without an
// idempotency key is not; with a key and a replayable body it is, with the
// same body; with a key but a body that cannot be replayed it is not.
func TestRetriesOnlyWhatIsSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bodies []string
		var mu atomic.Int64
		tr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, r.Method+" "+string(b))
			if mu.Add(1)%2 == 1 {
				refuse(429, "Retry-After", "1").ServeHTTP(w, r)
				return
			}
			ok200(w, r)
		}))
		c := newClient(t, tr, Config{})
		send := func(key string, body io.Reader) int {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://sluice.test/", body)
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			resp, err := c.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		start := time.Now()
		if code := send("", strings.NewReader("a")); code != 429 || time.Since(start) != 0 {
			t.Fatalf("POST without a key: %d after %s, want the 429 at once", code, time.Since(start))
		}
		mu.Store(0)
		if code := send("k1", strings.NewReader("b")); code != 200 {
			t.Fatalf("POST with a key: %d, want 200 after a retry", code)
		}
		mu.Store(0)
		start = time.Now()
		if code := send("k2", io.MultiReader(bytes.NewReader([]byte("c")))); code != 429 || time.Since(start) != 0 {
			t.Fatalf("POST with a key but no GetBody: %d after %s, want the 429 at once", code, time.Since(start))
		}
		want := []string{"POST a", "POST b", "POST b", "POST c"}
		if strings.Join(bodies, "|") != strings.Join(want, "|") {
			t.Fatalf("server saw %q, want %q", bodies, want)
		}
	})
}

// A retry that adaptive throttling rejects leaves the server's answer
// standing: the caller gets the 429, not ErrThrottled.
func TestThrottledRetryReturnsTheServersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(refuse(429, "Retry-After", "1")))
		c := newClient(t, tr, Config{ThrottleK: 2})
		c.throttle.rand = func() float64 { return 0 } // reject whenever p > 0
		code, body, err := get(t, t.Context(), c)
		if code != 429 || body != "refused" || err != nil || len(h.all()) != 1 {
			t.Fatalf("got %d %q %v after %d requests, want the first 429", code, body, err, len(h.all()))
		}
		if _, _, err := get(t, t.Context(), c); !errors.Is(err, ErrThrottled) {
			t.Fatalf("a new request: %v, want ErrThrottled", err)
		}
	})
}

// A refusal with a body too long to hold while waiting is returned, whole,
// instead of retried.
func TestLongRefusalBodyIsReturnedWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		long := strings.Repeat("x", maxBufferedBody+1000)
		tr := serve(t, h.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			io.WriteString(w, long)
		})))
		c := newClient(t, tr, Config{})
		start := time.Now()
		code, body, err := get(t, t.Context(), c)
		if code != 503 || body != long || err != nil || time.Since(start) != 0 || len(h.all()) != 1 {
			t.Fatalf("got %d, %d bytes, %v after %s and %d requests; want the 503 whole, at once", code, len(body), err, time.Since(start), len(h.all()))
		}
	})
}

// Cancelling the request while it waits for a retry ends the wait.
func TestCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, refuse(429, "Retry-After", "2"))
		c := newClient(t, tr, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		start := time.Now()
		if _, _, err := get(t, ctx, c); !errors.Is(err, context.Canceled) || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("%v after %s, want context.Canceled after 500ms", err, time.Since(start))
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
