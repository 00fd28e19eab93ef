package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The status page tests load the page in headless Chromium, in each state
// an operator meets: healthy, Redis down, a failed reload, shadow traffic.
// They check what its script drew. ./scripts/test installs Chromium and
// sets SLUICE_REQUIRE_BROWSER=1, so there (and wherever CI is set) they
// cannot be skipped.
//
// With SLUICE_SCREENSHOTS=1 they also write the screenshots of
// docs/images (status-healthy.png, status-redis-down.png,
// status-reload-error.png, status-shadow.png):
//
//	SLUICE_SCREENSHOTS=1 go test -run TestStatusPage ./cmd/sluice/

// chromium returns the browser to run, or skips the test where none is
// required.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_BROWSER") != "" || os.Getenv("CI") != "" {
		t.Fatal("no Chromium on PATH (apt-get install chromium)")
	}
	t.Skip("no Chromium on PATH; ./scripts/test installs it")
	return ""
}

// renderStatus loads p's status page in the browser and returns the DOM its
// script drew; with SLUICE_SCREENSHOTS set and a name it also writes
// docs/images/status-NAME.png.
func renderStatus(t *testing.T, p *proc, name string) string {
	t.Helper()
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}
	out, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", p.url("admin", "/status"))...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if os.Getenv("SLUICE_SCREENSHOTS") != "" && name != "" {
		file, err := filepath.Abs(filepath.Join("..", "..", "docs", "images", "status-"+name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		mkdir(t, filepath.Dir(file))
		shot := exec.CommandContext(ctx, browser, append(args, "--window-size=1200,1500", "--screenshot="+file, p.url("admin", "/status"))...)
		if out, err := shot.CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot: %v\n%s", err, out)
		}
		t.Logf("wrote %s", file)
	}
	// The page's own script is left out: only what it drew is checked.
	dom, _, _ := strings.Cut(string(out), "<script>")
	return dom
}

// wantInDOM checks that dom holds each of want.
func wantInDOM(t *testing.T, dom string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("the rendered status page lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("rendered DOM:\n%s", dom)
	}
}

// waitCharted waits until the server's history holds a point with
// decisions of limit (the page charts what the server kept, not what it
// saw itself).
func waitCharted(t *testing.T, p *proc, limit string) {
	t.Helper()
	waitFor(t, "a history point of "+limit, func() bool {
		var st struct {
			History struct {
				Series []struct {
					Limit  string
					Points map[string][]int64
				}
			}
		}
		json.Unmarshal([]byte(get(t, p.url("admin", "/status.json")).body), &st)
		for _, s := range st.History.Series {
			if s.Limit == limit && len(s.Points) > 0 {
				return true
			}
		}
		return false
	})
}

// TestStatusPageHealthy: rules, totals with right-aligned numbers, a chart
// with its axes from the server's history the moment the page opens, a
// heavy key shown by its part's name with its value masked, readiness and
// the store.
func TestStatusPageHealthy(t *testing.T) {
	chromium(t)
	p := start(t, nil)
	for range 12 {
		get(t, p.url("gateway", "/"))
	}
	waitCharted(t, p, "per-ip")
	dom := renderStatus(t, p, "healthy")
	wantInDOM(t, dom,
		`<td>everything</td>`,                                                                  // the rules table
		`<b>per-ip</b> by <code>ip</code>`,                                                     // a limit with its key
		`token_bucket(1/s, burst 5)`,                                                           // and its algorithm
		`<td>gateway</td><td>per-ip</td><td class="n">5</td>`,                                  // totals, right-aligned
		`<th class="n">refused</th>`,                                                           // under right-aligned headers
		`<th class="n">admitted uncounted</th>`,                                                // on_error: open, not "degraded"
		`<code>ip=key#`,                                                                        // a heavy key, its value masked
		`<polyline`,                                                                            // a chart
		`class="ytick">0/s</text>`, `class="xtick">now</text>`, `class="xtick">−10 min</text>`, // its axes
		`<span class="state good">ready</span>`,
		`<span class="state good">answers</span>`,
		`none (the memory store cannot fail)`,
		`Key values are masked`,
		`Load shedding is off`, `<table id="shed" hidden="">`, // no empty table
	)
	if strings.Contains(dom, "No decisions yet") {
		t.Error(`"No decisions yet" beside decisions`)
	}
}

// TestStatusPageShedding: with a policy's shed: section the load shedding
// table shows each listener that sheds, and nothing says it is off.
func TestStatusPageShedding(t *testing.T) {
	chromium(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, "shed: {initial_limit: 4, min_limit: 4, max_limit: 4}\nrules:\n  - name: slow\n    match: {path: /slow}\n    priority: sheddable\n")
	p := start(t, nil, "--policy", policy)
	get(t, p.url("gateway", "/"))
	dom := renderStatus(t, p, "")
	wantInDOM(t, dom, `<table id="shed"><thead>`, `<tbody><tr><td>gateway</td>`)
	if strings.Contains(dom, "Load shedding is off") {
		t.Error(`"Load shedding is off" while the gateway sheds`)
	}
}

// TestStatusPageEmpty: before any traffic the page says so, once.
func TestStatusPageEmpty(t *testing.T) {
	chromium(t)
	p := start(t, nil)
	dom := renderStatus(t, p, "")
	wantInDOM(t, dom, `No decisions yet: send some traffic.`, `No key refused yet.`)
	if strings.Contains(dom, "<polyline") {
		t.Error("a chart without decisions")
	}
}

// TestStatusPageRedisDown: with the Redis under sluice killed, the page
// says not ready (as /readyz does), the store does not answer, the breaker
// is open and decisions are made without it.
func TestStatusPageRedisDown(t *testing.T) {
	chromium(t)
	rp := redistest.StartProcess(t)
	p := start(t, nil, "--store", "redis", "--redis-addrs", rp.Addr, "--redis-timeout", "200ms", "--redis-prefix", redistest.Prefix(t))
	for range 3 {
		get(t, p.url("gateway", "/"))
	}
	rp.Kill()
	waitFor(t, "the breaker to open", func() bool {
		get(t, p.url("gateway", "/"))
		return metric(t, p, "sluice_failover_breaker_state") == 1
	})
	if r := get(t, p.url("admin", "/readyz")); r.status != 503 {
		t.Fatalf("/readyz with Redis down: %d", r.status)
	}
	waitCharted(t, p, "per-ip")
	dom := renderStatus(t, p, "redis-down")
	wantInDOM(t, dom,
		`<span class="state bad">not ready</span> the store does not answer`,
		`<span class="state bad">does not answer</span> redis `,
		`<span class="state bad">open</span> Redis is bypassed`,
		`by the local fallback`,
		`<th class="n">without store</th>`,
	)
	if strings.Contains(dom, `<span class="state good">ready</span>`) {
		t.Error("the page says ready while /readyz answers 503")
	}
}

// TestStatusPageReloadError: a policy file broken after start is shown with
// its error, the previous policy still serving.
func TestStatusPageReloadError(t *testing.T) {
	chromium(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: all
    match: {path: /}
    limits:
      - {name: cap, key: ip, algorithm: token_bucket, rate: 1/s, burst: 5}
`)
	p := start(t, nil, "--policy", policy)
	for range 8 {
		get(t, p.url("gateway", "/"))
	}
	writeFile(t, policy, "rules:\n  - name: all\n    limits: [{name: cap, key: ip, algorithm: token_bucket, rate: fast}]\n")
	p.signal(syscall.SIGHUP)
	waitFor(t, "the broken file to be rejected", func() bool {
		return metric(t, p, `sluice_config_reloads_total{config="policy",result="error"}`) >= 1
	})
	waitCharted(t, p, "cap")
	dom := renderStatus(t, p, "reload-error")
	wantInDOM(t, dom,
		`The last reload of the policy failed; the previous one is still serving`,
		`policy.yaml:3: rule "all"`,
		`<td>all</td>`, // the previous policy's rule
	)
}

// TestStatusPageShadow: a shadow limit is shown as the share of the
// traffic it sees that it would refuse.
func TestStatusPageShadow(t *testing.T) {
	chromium(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: trial
    match: {path: /}
    limits:
      - {name: trial-cap, key: ip, algorithm: fixed_window, limit: 4, window: 1h}
    action: {refuse: shadow}
  - name: all
    match: {path: /}
    limits:
      - {name: cap, key: global, algorithm: fixed_window, limit: 1000, window: 1h}
`)
	p := start(t, nil, "--policy", policy)
	for range 10 {
		if r := get(t, p.url("gateway", "/")); r.status != 200 {
			t.Fatalf("a shadow limit refused: %d", r.status)
		}
	}
	waitCharted(t, p, "trial-cap")
	dom := renderStatus(t, p, "shadow")
	wantInDOM(t, dom,
		`<td>trial-cap</td>`,
		`<td class="n">60.0% of 10 seen</td>`, // 4 admitted, 6 would be refused
		`/s would be refused`,
	)
}
