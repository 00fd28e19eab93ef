package sluiceclient

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// The storm: stormClients clients each start one request a second for
// stormSurge against a sluice server admitting stormLimit a second, 5x
// over its limit; then the surge ends.
const (
	stormClients = 200
	stormLimit   = 40
	stormSurge   = 10 * time.Second
)

// stormResult is what the server saw of a storm.
type stormResult struct {
	requests  int           // requests that reached the server
	admitted  int           // of them admitted (200)
	succeeded int           // original requests that ended with a 200
	drained   time.Duration // after the surge, until the last request reached the server
	refusing  time.Duration // after the surge, until the last refusal
	peak      int           // most requests reaching the server in one second
}

// naive retries a refused request at once, up to five times: the retry
// loop with no backoff that storms are made of.
type naive struct{ base http.RoundTripper }

func (n naive) RoundTrip(req *http.Request) (*http.Response, error) {
	for i := 0; ; i++ {
		resp, err := n.base.RoundTrip(req)
		if err != nil || i == 5 || resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, err
		}
		resp.Body.Close()
	}
}

// outcomes records the time and status of every request a server answers.
type outcomes struct {
	mu  sync.Mutex
	at  []time.Time
	ok  []bool
	beg time.Time
}

func (o *outcomes) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, code: 200}
		next.ServeHTTP(rec, r)
		o.mu.Lock()
		o.at = append(o.at, time.Now())
		o.ok = append(o.ok, rec.code == 200)
		o.mu.Unlock()
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// runStorm runs the storm with one transport per client, made by client.
func runStorm(t *testing.T, client func(base http.RoundTripper) http.RoundTripper) stormResult {
	var res stormResult
	synctest.Test(t, func(t *testing.T) {
		o := &outcomes{beg: time.Now()}
		tr := serve(t, o.wrap(limited(t, sluice.TokenBucket(sluice.PerSecond(stormLimit), stormLimit), ok200)))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range stormClients {
			rt := client(tr)
			offset := time.Duration(i) * time.Second / stormClients
			wg.Go(func() {
				time.Sleep(offset)
				for range int(stormSurge / time.Second) {
					wg.Go(func() {
						code, _, err := get(t, t.Context(), rt)
						if err == nil && code == 200 {
							mu.Lock()
							res.succeeded++
							mu.Unlock()
						}
					})
					time.Sleep(time.Second)
				}
			})
		}
		wg.Wait()
		res.summarise(o)
	})
	return res
}

// summarise reads the server's record of a storm.
func (res *stormResult) summarise(o *outcomes) {
	end := o.beg.Add(stormSurge)
	perSecond := map[int64]int{}
	for i, at := range o.at {
		res.requests++
		perSecond[int64(at.Sub(o.beg)/time.Second)]++
		if o.ok[i] {
			res.admitted++
		} else if d := at.Sub(end); d > res.refusing {
			res.refusing = d
		}
		if d := at.Sub(end); d > res.drained {
			res.drained = d
		}
	}
	for _, n := range perSecond {
		res.peak = max(res.peak, n)
	}
}

// Seed 000's storm: 200 clients against a sluice server whose limit they
// exceed 5x. Naive clients (five retries at once) multiply the load the
// server must refuse; sluiceclient's clients add at most their retry
// budget, come back when told, and get more of their requests through.
func TestStorm(t *testing.T) {
	originals := stormClients * int(stormSurge/time.Second)
	polite := func(cfg Config) func(http.RoundTripper) http.RoundTripper {
		return func(base http.RoundTripper) http.RoundTripper { return newClient(t, base, cfg) }
	}
	rows := []struct {
		name   string
		client func(http.RoundTripper) http.RoundTripper
		res    stormResult
	}{
		{name: "naive", client: func(base http.RoundTripper) http.RoundTripper { return naive{base} }},
		{name: "sluiceclient", client: polite(Config{})},
		{name: "  floor 10", client: polite(Config{BudgetFloor: 10})},
		{name: "  ThrottleK 2", client: polite(Config{ThrottleK: 2})},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, %d requests each over %s, limit %d/s (offered %dx)\n",
		stormClients, originals/stormClients, stormSurge, stormLimit, stormClients/stormLimit)
	fmt.Fprintf(&b, "%-14s %9s %6s %7s %9s %10s %10s %9s %8s\n", "client", "requests", "×orig", "peak/s", "admitted", "goodput/s", "succeeded", "refusing", "drained")
	for i := range rows {
		r := &rows[i]
		r.res = runStorm(t, r.client)
		busy := (stormSurge + r.res.drained).Seconds()
		fmt.Fprintf(&b, "%-14s %9d %6.2f %7d %9d %10.1f %9.1f%% %9s %8s\n", r.name, r.res.requests, float64(r.res.requests)/float64(originals),
			r.res.peak, r.res.admitted, float64(r.res.admitted)/busy, 100*float64(r.res.succeeded)/float64(originals),
			r.res.refusing.Round(10*time.Millisecond), r.res.drained.Round(10*time.Millisecond))
	}
	t.Log("\n" + b.String())
	naiveRes, defaults, throttled := rows[0].res, rows[1].res, rows[3].res
	if naiveRes.requests < 4*originals {
		t.Errorf("naive clients sent %d requests, want the storm (≥ 4x the %d originals)", naiveRes.requests, originals)
	}
	// The budget allows 10% of a client's requests of the last 10 s, plus
	// 3, and the run lasts less than two windows.
	if bound := originals + originals/10 + stormClients*3*2; defaults.requests > bound {
		t.Errorf("sluiceclient sent %d requests, want at most %d", defaults.requests, bound)
	}
	if defaults.succeeded < naiveRes.succeeded || throttled.requests > originals {
		t.Errorf("sluiceclient succeeded %d times (naive %d); with ThrottleK 2 sent %d requests for %d originals",
			defaults.succeeded, naiveRes.succeeded, throttled.requests, originals)
	}
}
