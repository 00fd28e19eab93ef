package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// apiDecisions sums sluice_decisions_total over the decision API's series.
func apiDecisions(t *testing.T, p *proc, token string) float64 {
	t.Helper()
	body := get(t, p.url("admin", "/metrics"), "Authorization", "Bearer "+token).body
	var n float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `sluice_decisions_total{`) && strings.Contains(line, `source="api"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
	}
	return n
}

// TestAuth: with --auth-tokens, the decision API and the admin listener
// answer 401 to a missing or wrong token (and the API's refused request is
// neither decided nor counted), the right token works, /healthz and
// /readyz stay open for probes, and pprof is off unless asked for.
func TestAuth(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "# one a line\nsecret-one\n\n  secret-two  \n")
	p := start(t, nil, "--auth-tokens", tokens)
	const check = `{"checks":[{"name":"n","key":"k","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}]}`

	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "Bearer secret-one-and-more"}, {"Authorization", "Basic secret-one"}} {
		r := do(t, "POST", p.url("api", "/v1/check"), check, h...)
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("decision API with %q: %d %q, want 401 with WWW-Authenticate", h, r.status, r.body)
		}
	}
	if n := apiDecisions(t, p, "secret-one"); n != 0 {
		t.Errorf("refused requests were counted as %v decisions", n)
	}
	// The limit (1 an hour) is whole: the refused requests charged nothing.
	if r := do(t, "POST", p.url("api", "/v1/check"), check, "Authorization", "Bearer secret-two"); r.status != 200 || !strings.Contains(r.body, `"allowed":true`) {
		t.Errorf("decision API with a good token: %d %q, want 200 and allowed", r.status, r.body)
	}
	if n := apiDecisions(t, p, "secret-one"); n != 1 {
		t.Errorf("%v decisions counted, want 1", n)
	}
	if body := get(t, p.url("admin", "/metrics"), "Authorization", "Bearer secret-one").body; !strings.Contains(body, `sluice_unauthorized_total{listener="api"} 4`) {
		t.Errorf("the 4 refused API requests are not counted in sluice_unauthorized_total")
	}

	for _, path := range []string{"/metrics", "/status.json", "/status"} {
		if r := get(t, p.url("admin", path)); r.status != 401 {
			t.Errorf("admin %s without a token: %d, want 401", path, r.status)
		}
		if r := get(t, p.url("admin", path), "Authorization", "Bearer secret-one"); r.status != 200 {
			t.Errorf("admin %s with a token: %d, want 200", path, r.status)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := get(t, p.url("admin", path)); r.status != 200 {
			t.Errorf("probe %s without a token: %d, want 200", path, r.status)
		}
	}
	if r := get(t, p.url("admin", "/debug/pprof/"), "Authorization", "Bearer secret-one"); r.status != 404 {
		t.Errorf("pprof without --pprof: %d, want 404", r.status)
	}

	q := start(t, nil, "--pprof")
	if r := get(t, q.url("admin", "/debug/pprof/")); r.status != 200 {
		t.Errorf("pprof with --pprof: %d, want 200", r.status)
	}
}
