package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeRedisDown kills the Redis under a running sluice serve: each
// rule answers as its on_error says (open admits, closed refuses with 503
// and Retry-After, fallback enforces its share of the limit locally), the
// breaker opens, /readyz reports it; when Redis returns, sluice goes back
// to it within about a probe interval.
func TestServeRedisDown(t *testing.T) {
	rp := redistest.StartProcess(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: open
    match: {path: /open}
    limits:
      - {name: open-cap, key: global, algorithm: token_bucket, rate: 1/h, burst: 10}
    action: {on_error: open}
  - name: closed
    match: {path: /closed}
    limits:
      - {name: closed-cap, key: global, algorithm: token_bucket, rate: 1/h, burst: 10}
    action: {on_error: closed}
  - name: fallback
    match: {path: /fallback}
    limits:
      - {name: fallback-cap, key: global, algorithm: token_bucket, rate: 1/h, burst: 10}
    action: {on_error: fallback}
`)
	p := start(t, nil, "--store", "redis", "--redis-addrs", rp.Addr, "--policy", policy,
		"--redis-timeout", "200ms", "--fallback-scale", "0.5", "--degraded-header", "Sluice-Degraded", "--redis-prefix", redistest.Prefix(t))
	status := func(path string) int { return get(t, p.url("gateway", path)).status }
	for _, path := range []string{"/open", "/closed", "/fallback"} {
		if r := get(t, p.url("gateway", path)); r.status != 200 || r.header.Get("Sluice-Degraded") != "" {
			t.Fatalf("%s with Redis up: %d, Sluice-Degraded %q", path, r.status, r.header.Get("Sluice-Degraded"))
		}
	}

	rp.Kill()
	// The first failures open the breaker (5 in a row by default).
	for i := range 8 {
		r := get(t, p.url("gateway", "/open"))
		if r.status != 200 || r.header.Get("Sluice-Degraded") != "true" {
			t.Fatalf("/open with Redis down, request %d: %d, Sluice-Degraded %q; want 200 (fail open), marked", i, r.status, r.header.Get("Sluice-Degraded"))
		}
	}
	if got := metric(t, p, "sluice_failover_breaker_state"); got != 1 {
		t.Errorf("breaker state %v after 8 failed calls, want 1 (open)", got)
	}
	r := get(t, p.url("gateway", "/closed"))
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("/closed with Redis down: %d Retry-After %q, want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	admitted := 0
	for range 8 {
		if status("/fallback") == 200 {
			admitted++
		}
	}
	if admitted != 4 { // burst 10 × fallback scale 0.5, less the request it saw while Redis was up
		t.Errorf("/fallback with Redis down admitted %d of 8, want 4 (half the burst, locally, less the one request made before)", admitted)
	}
	if r := get(t, p.url("admin", "/readyz")); r.status != 503 {
		t.Errorf("/readyz with Redis down: %d", r.status)
	}
	if r := get(t, p.url("admin", "/readyz?degraded=ok")); r.status != 200 || !contains(r.body, "degraded") {
		t.Errorf("/readyz?degraded=ok with Redis down: %d %s", r.status, r.body)
	}
	// Admitted uncounted (on_error: open) is one outcome, degraded, whether
	// failover or the decision path applied the mode; the status page's
	// column and its store panel count the same requests.
	if got := metric(t, p, `sluice_decisions_total{degraded="true",limit="open-cap",outcome="admitted_uncounted",source="gateway"}`); got < 8 {
		t.Errorf("admissions uncounted: %v, want at least 8", got)
	}
	var st struct {
		Counts []struct {
			Limit  string
			Counts map[string]int64
		}
		StoreState struct {
			DegradedOpen int64 `json:"degraded_open"`
		} `json:"store_state"`
	}
	if err := json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range st.Counts {
		found = found || c.Limit == "open-cap"
		if c.Limit == "open-cap" && (c.Counts["admitted_uncounted"] != st.StoreState.DegradedOpen || c.Counts["admitted_uncounted"] < 8 || c.Counts["without_store"] < 8) {
			t.Errorf("status page: open-cap counts %v, store panel %d admitted uncounted; want the same, at least 8", c.Counts, st.StoreState.DegradedOpen)
		}
	}
	if !found {
		t.Errorf("status page: no counts of open-cap: %+v", st.Counts)
	}

	rp.Restart() // empty: it persisted nothing
	began := time.Now()
	waitFor(t, "sluice to use Redis again", func() bool {
		status("/open")
		return metric(t, p, "sluice_failover_breaker_state") == 0
	})
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("back on Redis after %v; the probe interval is 1s", took)
	}
	// Redis restarted empty: its full burst is there again, less the 4 the
	// fallback admitted, which are charged to Redis once it answers;
	// counted in Redis, not locally.
	p.waitLog("charged the primary store for what the fallback admitted", 5*time.Second)
	calls := metric(t, p, "sluice_failover_calls_total")
	for i := range 6 {
		if c := status("/fallback"); c != 200 {
			t.Fatalf("/fallback after recovery, request %d: %d", i, c)
		}
	}
	if c := status("/fallback"); c != 429 {
		t.Errorf("/fallback's 7th request after recovery: %d, want 429 (burst 10, 4 admitted by the fallback)", c)
	}
	if got := metric(t, p, "sluice_failover_calls_total"); got < calls+7 {
		t.Errorf("calls to Redis after recovery: %v → %v, want 7 more", calls, got)
	}
	if r := get(t, p.url("admin", "/readyz")); r.status != 200 {
		t.Errorf("/readyz after recovery: %d %s", r.status, r.body)
	}
}
