package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStatusPageInBrowser loads the status page in headless Chromium and
// checks what its script drew: the rules, the totals, the heavy keys and a
// live chart. ./scripts/test installs Chromium and sets
// SLUICE_REQUIRE_BROWSER=1, so there (and wherever CI is set) the test
// cannot be skipped.
func TestStatusPageInBrowser(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("SLUICE_REQUIRE_BROWSER") != "" || os.Getenv("CI") != "" {
			t.Fatal("no Chromium on PATH (apt-get install chromium)")
		}
		t.Skip("no Chromium on PATH; ./scripts/test installs it")
	}
	p := start(t, nil)
	for range 7 {
		get(t, p.url("gateway", "/"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { // traffic between the page's polls, for its charts to plot
		for ctx.Err() == nil {
			if resp, err := client.Get(p.url("gateway", "/")); err == nil {
				resp.Body.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Virtual time lets the page's two-second poll run three times at once,
	// so a chart (which needs two samples) is drawn.
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=7000", "--dump-dom", p.url("admin", "/status"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	for _, want := range []string{
		`<td>everything</td>`,              // the rules table
		`<b>per-ip</b> by <code>ip</code>`, // a limit with its key
		`token_bucket(1/s, burst 5)`,       // and its algorithm
		`<td>gateway</td><td>per-ip</td>`,  // totals
		`<code>key#`,                       // a heavy key, masked
		`<polyline`,                        // a live chart
		`>ready<`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered status page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("rendered DOM:\n%s", dom)
	}
}
