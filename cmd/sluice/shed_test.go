package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeShedding runs sluice serve with a policy's shed: section at a
// fixed limit of 4 in flight: requests to /slow hold slots; sheddable ones
// (the route's priority) are refused once 3 are in flight, default ones at
// 4, with 503, Retry-After and a problem document; a trusted proxy's
// header overrides the route; /metrics and /status.json show the limit.
func TestServeShedding(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
trusted_proxies: [127.0.0.1]
shed: {initial_limit: 4, min_limit: 4, max_limit: 4, critical_wait: 0s, retry_after: 2s}
rules:
  - name: slow
    match: {path: /slow}
    priority: sheddable
`)
	p := start(t, nil, "--policy", policy)
	slow := p.url("gateway", "/slow?ms=3000")
	hold := func() {
		go func() {
			req, _ := http.NewRequest("GET", slow, nil)
			req.Header.Set("Sluice-Priority", "default")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitInFlight := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for metric(t, p, `sluice_shed_in_flight{listener="gateway"}`) != n {
			if time.Now().After(deadline) {
				t.Fatalf("in flight never reached %v", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 3 {
		hold()
	}
	waitInFlight(3)
	r := get(t, slow) // sheddable by its route: 3 of 4 is its share
	if r.status != 503 || r.header.Get("Retry-After") != "2" || !strings.Contains(r.body, `"priority":"sheddable"`) {
		t.Fatalf("sheddable at 3 of 4: %d %v %s", r.status, r.header, r.body)
	}
	if r := get(t, p.url("gateway", "/")); r.status != 200 {
		t.Fatalf("default at 3 of 4: %d %s", r.status, r.body)
	}
	hold()
	waitInFlight(4)
	if r := get(t, p.url("gateway", "/")); r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("default at 4 of 4: %d %v %s", r.status, r.header, r.body)
	}
	checkShedStatus(t, p)
	// The decision API has a Limiter of its own, with room.
	if r := do(t, "POST", p.url("api", "/v1/check"), `{"request": {"path": "/", "ip": "203.0.113.7"}}`); r.status != 200 {
		t.Fatalf("decision API under its own shedding: %d %s", r.status, r.body)
	}
	if got := metric(t, p, `sluice_shed_requests_total{listener="api",outcome="admitted",priority="default"}`); got != 1 {
		t.Errorf("decision API requests admitted = %v, want 1", got)
	}
}

// checkShedStatus checks what /metrics and /status.json say of the
// gateway's shedding at the end of TestServeShedding.
func checkShedStatus(t *testing.T, p *proc) {
	t.Helper()
	if got := metric(t, p, `sluice_shed_limit{algorithm="vegas",listener="gateway"}`); got != 4 {
		t.Errorf("sluice_shed_limit = %v, want 4", got)
	}
	if got := metric(t, p, `sluice_shed_requests_total{listener="gateway",outcome="shed",priority="sheddable"}`); got != 1 {
		t.Errorf("sheddable shed = %v, want 1", got)
	}
	var st struct {
		Shed map[string]struct {
			Limit    int
			InFlight int `json:"in_flight"`
		}
	}
	if err := json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st); err != nil || st.Shed["gateway"].InFlight != 4 || st.Shed["gateway"].Limit != 4 {
		t.Errorf("status.json shed: %+v (%v)", st.Shed, err)
	}
}
