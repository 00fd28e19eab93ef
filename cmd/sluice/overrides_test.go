package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sched"
)

// TestServeOverridesAcrossInstances: two sluice serve on one Redis. An
// override set through one (sluice overrides set) applies on the other
// within a second, and after the other restarts: scale 5 on acme lets it
// through 6 of 6 on the other instance while other gets 2 of 4. A delete
// through the restarted one applies on the first within a second. The
// admin API's authentication applies.
func TestServeOverridesAcrossInstances(t *testing.T) {
	rdb := redistest.Standalone(t)
	dir := t.TempDir()
	policy, tokens := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens")
	writeFile(t, policy, `
rules:
  - name: tenant
    match: {path: /tenant/}
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
`)
	writeFile(t, tokens, "admin-s3cret\n")
	args := []string{"--store", "redis", "--redis-addrs", rdb.Options().Addr, "--redis-prefix", redistest.Prefix(t),
		"--policy", policy, "--auth-tokens", tokens, "--redis-timeout", "5s"}
	a, b := start(t, nil, args...), start(t, nil, args...)
	if r := do(t, "PUT", a.url("admin", "/admin/overrides/per-tenant/acme"), `{"scale": 5}`); r.status != 401 {
		t.Fatalf("a PUT without a token: %d %s, want 401", r.status, r.body)
	}
	cli := func(p *proc, args ...string) string {
		t.Helper()
		out, errOut, code := runSluice(t, append([]string{"overrides", "--admin", p.addrs["admin"], "--token-file", tokens}, args...)...)
		if code != 0 {
			t.Fatalf("sluice overrides %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	for _, bad := range []struct{ args, want string }{
		{"set per-tenant acme --scale -1", "400: scale: -1: want a number above 0"},
		{"set per-tenant acme --scale 0", "400: scale: 0: want a number above 0"},
		{"set per-tenant acme --scale 1e300", "400: the override does not apply"},
		{"set per-tenant acme --scale 2 --ttl soon", "400: ttl"},
		{"set per-tenant acme --limit {", "400: the override does not apply to limit per-tenant: policy: invalid: override:1: want a limit such as"},
		{"set per-tenant acme", "400: give one of"},
		{"set nope acme --scale 2", "404: the policy has no limit \"nope\"; 'sluice keys list' shows"},
		{"delete per-tenant acme", "404: no override of limit \"per-tenant\""},
	} {
		args := append([]string{"overrides", "--admin", a.addrs["admin"], "--token-file", tokens}, strings.Fields(bad.args)...)
		if _, errOut, code := runSluice(t, args...); code != 1 || !strings.Contains(errOut, bad.want) {
			t.Errorf("sluice overrides %s: exit %d, %s; want exit 1 saying %q", bad.args, code, errOut, bad.want)
		}
	}
	cli(a, "set", "per-tenant", "acme", "--scale", "5", "--ttl", "1h", "--reason", "launch week")
	applied := appliedWithin(t, b, 1)
	if r := get(t, a.url("admin", "/admin/overrides"), "Authorization", "Bearer admin-s3cret"); !strings.Contains(r.body, `"reason":"launch week"`) {
		t.Errorf("GET /admin/overrides: %d %s", r.status, r.body)
	}
	if n := admitted(t, b, "acme", 6); n != 6 {
		t.Errorf("acme: %d of 6 admitted on the other instance, want 6 (scale 5 of 2/h)", n)
	}
	if n := admitted(t, b, "other", 4); n != 2 {
		t.Errorf("other: %d of 4 admitted, want 2", n)
	}
	b.signal(syscall.SIGTERM)
	b.wait(15 * time.Second)
	b = start(t, nil, args...)
	if v := metricAuth(t, b, "sluice_overrides "); v != 1 {
		t.Errorf("after a restart the instance applies %v overrides, want 1", v)
	}
	if n := admitted(t, b, "acme", 5); n != 4 {
		t.Errorf("acme after the restart: %d of 5 admitted, want the 4 left of 10", n)
	}
	if out := cli(b, "list"); !strings.Contains(out, "per-tenant") || !strings.Contains(out, "scale 5") || !strings.Contains(out, "launch week") {
		t.Errorf("sluice overrides list:\n%s", out)
	}
	cli(b, "delete", "per-tenant", "acme")
	deleted := appliedWithin(t, a, 0)
	t.Logf("applied on the other instance %v after the set, %v after the delete", applied, deleted)
	if !strings.Contains(a.logs(), `"msg":"overrides: set","op":"set","limit":"per-tenant"`) || !strings.Contains(b.logs(), `"msg":"overrides: delete"`) {
		t.Errorf("the changes are not logged where they were made")
	}
	if v := metricAuth(t, a, `sluice_overrides_changes_total{op="set"} `); v != 1 {
		t.Errorf("sets counted on the first instance: %v, want 1", v)
	}
}

// appliedWithin waits until p applies n overrides, and fails t if that
// takes longer than a second and what the scheduler added meanwhile.
func appliedWithin(t *testing.T, p *proc, n float64) time.Duration {
	t.Helper()
	late := sched.Lateness()
	start := time.Now()
	for metricAuth(t, p, "sluice_overrides ") != n {
		if time.Since(start) > 10*time.Second {
			late()
			t.Fatalf("%s never applied the change", p.addrs["admin"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	if bound := time.Second + late(); took > bound {
		t.Errorf("%s applied the change after %v, want within %v (a second and the scheduler's lateness)", p.addrs["admin"], took, bound)
	}
	return took
}

func metricAuth(t *testing.T, p *proc, prefix string) float64 {
	t.Helper()
	return sampleValue(get(t, p.url("admin", "/metrics"), "Authorization", "Bearer admin-s3cret").body, prefix)
}

// admitted sends n requests of tenant to p's gateway and returns how many
// were admitted; the others must be refused.
func admitted(t *testing.T, p *proc, tenant string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		switch r := get(t, p.url("gateway", "/tenant/x"), "X-Tenant", tenant); r.status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("%s: %d %s", tenant, r.status, r.body)
		}
	}
	return ok
}
