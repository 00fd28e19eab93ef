package main

import (
	"context"

	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMetricsScripted drives scripted traffic through a real sluice serve
// in front of a real upstream and asserts the exact value of every series
// it should move, and the zero samples of those it should not (so that
// increase() sees their first event); then promtool lints the exposition.
func TestMetricsScripted(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" { // fails before its headers: a 502
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer upstream.Close()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: per-ip, key: ip, algorithm: fixed_window, limit: 5, window: 1h}
  - name: trial
    match: {path: /api/}
    limits:
      - {name: trial-cap, key: ip, algorithm: fixed_window, limit: 2, window: 1h}
    action: {refuse: shadow}
  - name: shaped
    match: {path: /shaped}
    limits:
      - {name: shaper, key: global, algorithm: leaky_bucket, rate: 2/m, queue: 1}
`)
	rlsConfig := filepath.Join(dir, "edge.yaml")
	writeFile(t, rlsConfig, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: generic_key
    value: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: generic_key
    value: unused
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
	config := filepath.Join(dir, "sluice.yaml")
	writeFile(t, config, "max_delay: 1m\n")
	p := start(t, nil, "--config", config, "--policy", policy, "--upstream", upstream.URL, "--rls", rlsConfig)

	scriptedTraffic(t, p)
	rls := rlsClient(t, p.addrs["grpc"])
	// remote_address admits 2 and refuses 1; the shadow limit, checked
	// only with the 2 admitted, would admit 1 and refuse 1.
	for range 3 {
		_, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonpb.RateLimitDescriptor{descriptor("remote_address", "203.0.113.7"), descriptor("generic_key", "trial")}})
		if err != nil {
			t.Fatal(err)
		}
	}
	body := get(t, p.url("admin", "/metrics")).body
	for _, want := range scriptedSeries() {
		if !hasLine(body, want) {
			t.Errorf("/metrics lacks the line %s", want)
		}
	}
	if strings.Contains(body, "sluice_failover_breaker_state") {
		t.Error("/metrics exports a breaker state with the memory store, which has no breaker")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	documentedMetrics(t, body)
	promtoolCheck(t, body)
}

// scriptedTraffic sends TestMetricsScripted's requests.
func scriptedTraffic(t *testing.T, p *proc) {
	t.Helper()
	for i := range 7 { // per-ip admits 5, refuses 2; the shadow limit sees the 5 and would refuse 3
		want := 200
		if i >= 5 {
			want = 429
		}
		if r := get(t, p.url("gateway", "/api/x")); r.status != want {
			t.Fatalf("request %d: %d, want %d", i, r.status, want)
		}
	}
	if r := get(t, p.url("gateway", "/broken")); r.status != 502 {
		t.Fatalf("/broken: %d, want 502", r.status)
	}
	get(t, p.url("gateway", "/shaped")) // admitted at once
	// The next waits 30 s for its turn: seen waiting, then given up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url("gateway", "/shaped"), nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "a waiting request", func() bool {
		return metric(t, p, `sluice_gateway_waiting_requests{limit="shaper"}`) == 1
	})
	cancel()
	<-done
	waitFor(t, "the waiting request to leave", func() bool {
		return metric(t, p, `sluice_gateway_waiting_requests{limit="shaper"}`) == 0
	})

}

// scriptedSeries are the lines /metrics must hold after scriptedTraffic.
func scriptedSeries() []string {
	d := `degraded="false",`
	return []string{
		`sluice_build_info{goversion="` + runtime.Version() + `",version="(devel)"} 1`,
		`sluice_config_reloads_total{config="policy",result="error"} 0`,
		`sluice_config_reloads_total{config="policy",result="ok"} 1`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="admitted",source="gateway"} 5`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="refused",source="gateway"} 2`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="delayed",source="gateway"} 0`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="failed",source="gateway"} 0`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="admitted_uncounted",source="gateway"} 0`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="invalid",source="gateway"} 0`,
		`sluice_decisions_total{` + d + `limit="trial-cap",outcome="shadow_admitted",source="gateway"} 2`,
		`sluice_decisions_total{` + d + `limit="trial-cap",outcome="shadow_refused",source="gateway"} 3`,
		`sluice_decisions_total{` + d + `limit="shaper",outcome="admitted",source="gateway"} 1`,
		`sluice_decisions_total{` + d + `limit="shaper",outcome="delayed",source="gateway"} 1`,
		`sluice_near_limit_total{limit="per-ip",source="gateway"} 2`, // the 4th and 5th of 5
		`sluice_near_limit_total{limit="shaper",source="gateway"} 1`, // the queue's one place taken
		`sluice_shaping_delay_seconds_count{source="gateway"} 1`,
		`sluice_shaping_delay_seconds_bucket{source="gateway",le="10"} 0`, // about 30 s
		`sluice_gateway_waiting_requests{limit="shaper"} 0`,
		`sluice_gateway_waiting_requests{limit="per-ip"} 0`,
		`sluice_gateway_responses_total{code="200"} 6`,
		`sluice_gateway_responses_total{code="429"} 2`,
		`sluice_gateway_responses_total{code="502"} 1`,
		`sluice_gateway_responses_total{code="503"} 0`,
		`sluice_gateway_responses_total{code="400"} 0`,
		`sluice_gateway_responses_total{code="431"} 0`,
		`sluice_upstream_errors_total 1`,
		`sluice_upstream_duration_seconds_count 7`, // 5 + /broken + the first /shaped
		`sluice_store_errors_total{op="take"} 0`,
		`sluice_config_reloads_total{config="rls",result="error"} 0`,
		`sluice_decisions_total{` + d + `limit="edge/remote_address",outcome="admitted",source="rls"} 2`,
		`sluice_decisions_total{` + d + `limit="edge/remote_address",outcome="refused",source="rls"} 1`,
		`sluice_decisions_total{` + d + `limit="edge/generic_key=trial",outcome="shadow_admitted",source="rls"} 1`,
		`sluice_decisions_total{` + d + `limit="edge/generic_key=trial",outcome="shadow_refused",source="rls"} 1`,
		`sluice_decisions_total{` + d + `limit="edge/generic_key=unused",outcome="refused",source="rls"} 0`,
		`sluice_decisions_total{` + d + `limit="per-ip",outcome="refused",source="api"} 0`, // the decision API's, from zero
		`sluice_decisions_total{` + d + `limit="explicit",outcome="refused",source="api"} 0`,
		`sluice_connections_refused_total{listener="gateway"} 0`,
		`sluice_connections_refused_total{listener="admin"} 0`,
	}
}

func hasLine(body, line string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// promtool returns the path of promtool (Debian's prometheus package),
// or skips the test where it is not required: under CI it is.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no promtool on PATH (apt-get install prometheus)")
		}
		t.Skip("no promtool on PATH (apt-get install prometheus)")
	}
	return p
}

// promtoolCheck lints an exposition with promtool check metrics.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// documentedMetrics checks that docs/metrics.md names every sluice series
// of an exposition.
func documentedMetrics(t *testing.T, body string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(body, "\n") {
		name, ok := strings.CutPrefix(line, "# TYPE sluice_")
		if !ok {
			continue
		}
		name = "sluice_" + strings.Fields(name)[0]
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not document %s", name)
		}
	}
}

// TestMetricsDocAlerts: the example alerts of docs/metrics.md pass
// promtool check rules, and name only series sluice exports.
func TestMetricsDocAlerts(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Example alerts")
	if !ok {
		t.Fatal(`docs/metrics.md has no "## Example alerts" section`)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	rules, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/metrics.md: no yaml block under Example alerts")
	}
	for _, name := range regexp.MustCompile(`\bsluice_[a-z_]+`).FindAllString(rules, -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count")
		if !strings.Contains(string(doc), "| `"+base+"` |") {
			t.Errorf("an alert names %s, which the reference does not list", name)
		}
	}
	file := filepath.Join(t.TempDir(), "alerts.yaml")
	writeFile(t, file, rules)
	if out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
